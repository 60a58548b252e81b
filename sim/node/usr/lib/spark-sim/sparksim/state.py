"""The state file that drives every hardware stand-in on a spark-sim node.

One JSON file per node (default /var/lib/spark-sim/state.json, overridable with
the SPARK_SIM_STATE environment variable) describes the hardware that cannot
exist in a container: the ConnectX-7 RDMA devices and their GID tables, the
fabric links, and the GB10 GPU. The stand-ins (show_gids, ibdev2netdev, ibstat,
ethtool, nvidia-smi, ib_write_bw) only read it (the RDMA ones through the sysfs
tree rdma.write_sysfs generates from it), except nvidia-smi -lgc/-rgc,
which records the locked clocks. The boot unit (spark-sim-boot.service) applies
what a reboot does to it (see boot.py) and regenerates the sysfs tree.

Schema (version 1)::

    {
      "version": 1,
      "hostname": "spark-head",
      "boot": {
        "count": 3,                    # boots so far (the boot unit increments it)
        "reshuffle_gids": false,       # move the RoCE GIDs to other indices at boot
        "seed": 0                      # makes the reshuffle deterministic per boot
      },
      "cables_seated": true,           # DAC cables are in the cages right now
      "faults": {                      # injected faults (sim/spark-sim fault HOST NAME | clear; the FAULTS table there)
        "lgc_fails": false             # nvidia-smi -lgc fails (gpu.py LGC_FAULTS; also lgc_unsupported)
      },
      "nic": {                         # the node's ConnectX-7 as a whole (spark-sim fault HOST throttled-link)
        "throttled": false,            # stale initialisation: every transfer to or from another node through
                                       # any of its ports moves ~13 Gb/s (a same-node loopback reads healthy)
        "throttle_persists": false,    # a reboot does not clear it (needs the AC power cycle)
        "power_degraded": false        # the power-delivery fault (nccl-power-degraded): NCCL's all-reduce at ~3 GB/s,
                                       # raw RDMA healthy; no reboot clears it (the torch stand-in's _sim.py)
      },
      "sysfs_root": "/var/lib/spark-sim/sys",   # the stand-in /sys (class/infiniband/...)
      "hcas": [                        # owned by rdma.py; rdma.default_hcas() makes it. The RDMA stand-ins
                                       # (show_gids, ibdev2netdev, ibstat, ethtool) read the sysfs tree that
                                       # rdma.write_sysfs() generates from it, never this JSON: call write_sysfs
                                       # again after any change here (the boot unit does at every boot)
        {
          "name": "rocep1s0f1",        # RDMA device name (class/infiniband/<name>)
          "node_type": 1,              # 1 CA (4 = iWARP RNIC: ibstat skips it)
          "ca_type": "MT4129",         # hca_type; ibstat "CA type"
          "pci_device_id": "0x1021",   # device/device; ibdev2netdev -v prints it as MT4129
          "fw": "28.45.4028",
          "hw_version": "0",
          "node_guid": "0x4cbb4703002e0001",      # OUI + 0300 + NIC part of the MAC
          "sys_image_guid": "0x4cbb4703002e0000", # node GUID of function 0 (rocep1s0f0)
          "pci": "0000:01:00.1",
          # optional: "pcie_link_speed" ("32.0 GT/s PCIe"), "pcie_link_width" (4; 2 = early GX10 BIOS)
          "vpd": {                     # PCI VPD (null: none, ibdev2netdev -v says NA); ibdev2netdev -v shows
            "id": "NVIDIA ConnectX-7 ...",   # the id string and, from the 4th `strings` line, the part
            "fields": [["PN", "MCX750500B-0D00_Ax"], ["EC", "A1"], ["V2", "MCX750500B-0D00_Ax     "],
                       ["SN", "MT...                   "], ["V0", "PCIeGen5 x4"]]
          },
          "ports": [
            {
              "port": 1,
              "netdev": "enp1s0f1np1", # fabric netdev (renamed at boot by the sim)
              "ipv4": "192.168.100.1", # rails only: the fabric address (boot.configure_links finds the link by it)
              "link_layer": "Ethernet",  # | InfiniBand
              "state": "up",           # up | down  (carrier; port 4: ACTIVE / 1: DOWN)
              "cable": true,           # a DAC is in the cage (ethtool: Port, "No cable" when down)
              "speed_mbps": 200000,    # what ethtool reports; rate "200 Gb/sec (4X HDR)", ibstat "Rate: 200"
              "lanes": 4,
              "bw_gbps": 98.0,         # healthy ib_write_bw figure for this rail
              "mtu": 9000,
              "mac": "4c:bb:47:2e:00:01",
              "gid_tbl_len": 256,      # gids/0..255 exist; unused ones read the zero GID
              # optional overrides (defaults derive from state/link_layer): "port_state" (ACTIVE, DOWN,
              # INIT, ARMED), "phys_state" (LinkUp, Disabled, Polling, ...), "rate" (the rate file),
              # "lid", "lmc", "sm_lid", "sm_sl", "cap_mask" ("0x00010000"), "link_ext_state" (ethtool)
              "gids": [                # the GID table; index -> entry; ndev null on InfiniBand ports
                {"index": 0, "gid": "fe80:0000:...", "type": "IB/RoCE v1", "ndev": "enp1s0f1np1"},
                {"index": 1, "gid": "fe80:0000:...", "type": "RoCE v2", "ndev": "enp1s0f1np1"},
                {"index": 2, "gid": "0000:...:ffff:c0a8:6401", "type": "IB/RoCE v1", "ndev": "enp1s0f1np1"},
                {"index": 3, "gid": "0000:...:ffff:c0a8:6401", "type": "RoCE v2", "ndev": "enp1s0f1np1"}
              ]
            }
          ]
        }
      ],
      "gpu": {                         # owned by gpu.py (nvidia-smi stand-in); gpu.default_gpu() makes it
        "name": "NVIDIA GB10",
        "index": 0,
        "bus_id": "0000000F:01:00.0",
        "uuid": "GPU-<uuid5 of the hostname>",
        "vbios_version": "9A.0B.25.00.00",
        "driver_version": "580.173.02", # NVIDIA-SMI/Driver Version; -q alignment and NVML version follow it
        "cuda_version": "13.0",
        "compute_cap": "12.1",
        "driver_loaded": true,         # false: every nvidia-smi call fails as without a driver (exit 9)
        "uvm_loaded": true,            # false (fault nvidia-uvm-missing): nvidia-smi answers, CUDA's cuInit 999
                                       #   (the torch stand-in, sim/vllm-standin/src/torch/_sim.py); absent = true
        "persistence_mode": true,      # Persistence-M On/Off now
        "persistence_at_boot": true,   # what nvidia-persistenced sets at each boot
        "display_active": false,       # Disp.A On/Off (a desktop session on the GPU)
        "performance_state": "P0",
        "temperature_c": 40,
        "power_draw_w": 11.0,          # summary prints int() of it ("11W"), CSV "11.00 W"
        "utilization_pct": 0,          # GPU-Util
        "compute_mode": "Default",
        "clock_sm_mhz": 2405,          # SM = graphics clock with no lock
        "clock_video_mhz": 2073,
        "clock_min_mhz": 300,          # supported range the field reports (-lgc accepts 0..clock_max_mhz)
        "clock_max_mhz": 3003,         # Max Clocks Graphics/SM; -lgc above it is refused
        "clock_max_video_mhz": 2073,
        "clock_app_mhz": 2418,         # Applications Clocks Graphics
        "clock_default_app_mhz": 2418, # Default Applications Clocks Graphics; also what -lgc tdp means
        "lock_landing_offset_mhz": 20, # a lock ceiling under clock_sm_mhz reads this much lower (2100 -> 2080)
        "locked_clocks": null,         # {"min_mhz": 0, "max_mhz": 2100} after nvidia-smi -lgc 0,2100;
                                       #   -rgc and every reboot (gpu.apply_boot) clear it
        "event_reasons_active": 0,     # nvmlClocksEventReason bit mask (0x4 = SW power cap, ...)
        "event_counters_us": {"sw_power_capping": 0, "sync_boost": 0, "sw_thermal_slowdown": 0,
                              "hw_thermal_slowdown": 0, "hw_power_braking": 0},
        "processes": [                 # rows of the Processes table; a reboot ends the "C" ones
          {"pid": 3405, "type": "G", "name": "/usr/lib/xorg/Xorg", "used_memory_mib": 242}
        ]
      }
    }
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

DEFAULT_STATE_PATH = "/var/lib/spark-sim/state.json"
DEFAULT_SYSFS_ROOT = "/var/lib/spark-sim/sys"


def state_path() -> str:
    return os.environ.get("SPARK_SIM_STATE", DEFAULT_STATE_PATH)


def load(path: str | None = None) -> dict[str, Any]:
    with open(path or state_path(), encoding="utf-8") as handle:
        return json.load(handle)


def save(state: dict[str, Any], path: str | None = None) -> None:
    """Write the state atomically (a reader never sees half a file)."""
    target = path or state_path()
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o644)  # readable by every user, like /sys and nvidia-smi
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def sysfs_root(state: dict[str, Any] | None = None) -> str:
    env = os.environ.get("SPARK_SIM_SYSFS")
    if env:
        return env
    if state and state.get("sysfs_root"):
        return state["sysfs_root"]
    return DEFAULT_SYSFS_ROOT
