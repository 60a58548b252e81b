"""The state file that drives every hardware stand-in on a spark-sim node.

One JSON file per node (default /var/lib/spark-sim/state.json, overridable with
the SPARK_SIM_STATE environment variable) describes the hardware that cannot
exist in a container: the ConnectX-7 RDMA devices and their GID tables, the
fabric links, and the GB10 GPU. The stand-ins (show_gids, ibdev2netdev, ibstat,
ethtool, nvidia-smi, ib_write_bw) only read it, except nvidia-smi -lgc/-rgc,
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
      "sysfs_root": "/var/lib/spark-sim/sys",   # the stand-in /sys (class/infiniband/...)
      "hcas": [
        {
          "name": "rocep1s0f1",        # RDMA device name
          "ca_type": "MT4129",
          "fw": "28.45.4028",
          "hw_version": "0",
          "node_guid": "0x...",
          "pci": "0000:01:00.1",
          "part": "MCX750500B-0D00_Ax",   # as ibdev2netdev -v prints it
          "ports": [
            {
              "port": 1,
              "netdev": "enp1s0f1np1", # fabric netdev (renamed at boot by the sim)
              "link_layer": "Ethernet",
              "state": "up",           # up | down  (carrier)
              "speed_mbps": 200000,    # what ethtool / ibstat report
              "throttled": false,      # stale-initialisation: ~13 Gb/s real bandwidth
              "throttle_persists": false,  # a reboot does not clear it (needs AC cycle)
              "bw_gbps": 98.0,         # healthy ib_write_bw figure for this rail
              "mtu": 9000,
              "mac": "4c:bb:47:2e:00:01",
              "gids": [                # the GID table; index -> entry
                {"index": 0, "gid": "fe80:0000:...", "type": "IB/RoCE v1", "ndev": "enp1s0f1np1"},
                {"index": 1, "gid": "fe80:0000:...", "type": "RoCE v2", "ndev": "enp1s0f1np1"},
                {"index": 2, "gid": "0000:...:ffff:c0a8:6401", "type": "IB/RoCE v1", "ndev": "enp1s0f1np1"},
                {"index": 3, "gid": "0000:...:ffff:c0a8:6401", "type": "RoCE v2", "ndev": "enp1s0f1np1"}
              ]
            }
          ]
        }
      ],
      "gpu": { ... }                   # owned by gpu.py (nvidia-smi stand-in)
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
