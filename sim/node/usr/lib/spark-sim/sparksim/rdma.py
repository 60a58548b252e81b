"""The ConnectX-7 RDMA side of a spark-sim node: state, reboot effects, stand-in sysfs.

Data flow::

    state["hcas"]  --write_sysfs()-->  <root>/class/infiniband/...  --read by-->  show_gids,
    (state.py)                         <root>/class/net/<netdev>/...               ibstat,
                                       <root>/bus/pci/devices/<pci>/...            ibdev2netdev,
                                                                                   ethtool

The stand-ins read only the sysfs tree, never the JSON, so they cannot disagree
with each other. Whoever changes ``state["hcas"]`` must call ``write_sysfs``
again (the boot unit does it at every boot).

The tree under ``<root>`` mimics what the Linux kernel (mlx5_ib, ib_core,
net-sysfs) presents, e.g. for ``rocep1s0f1`` port 1::

    class/infiniband/rocep1s0f1/node_type            "1: CA"
    class/infiniband/rocep1s0f1/hca_type             "MT4129"
    class/infiniband/rocep1s0f1/fw_ver               "28.45.4028"
    class/infiniband/rocep1s0f1/hw_rev               "0"
    class/infiniband/rocep1s0f1/node_guid            "4cbb:4703:002e:0001"
    class/infiniband/rocep1s0f1/sys_image_guid       "4cbb:4703:002e:0000"
    class/infiniband/rocep1s0f1/device               -> ../../../bus/pci/devices/0000:01:00.1
    class/infiniband/rocep1s0f1/ports/1/state        "4: ACTIVE"      | "1: DOWN"
    class/infiniband/rocep1s0f1/ports/1/phys_state   "5: LinkUp"      | "3: Disabled"
    class/infiniband/rocep1s0f1/ports/1/rate         "200 Gb/sec (4X HDR)" | "40 Gb/sec (4X QDR)"
    class/infiniband/rocep1s0f1/ports/1/link_layer   "Ethernet"
    class/infiniband/rocep1s0f1/ports/1/{lid,sm_lid} "0x0"    lid_mask_count, sm_sl "0"
    class/infiniband/rocep1s0f1/ports/1/cap_mask     "0x00010000"
    class/infiniband/rocep1s0f1/ports/1/gids/N       "0000:0000:0000:0000:0000:ffff:c0a8:6401"  N = 0..255
    class/infiniband/rocep1s0f1/ports/1/gid_attrs/types/N   "IB/RoCE v1" | "RoCE v2"
    class/infiniband/rocep1s0f1/ports/1/gid_attrs/ndevs/N   "enp1s0f1np1"
    class/net/enp1s0f1np1/{address,addr_len,type,carrier,operstate,mtu,speed,dev_id,dev_port,ifindex}
    class/net/enp1s0f1np1/device                     -> ../../../bus/pci/devices/0000:01:00.1
    bus/pci/devices/0000:01:00.1/{vendor,device,resource,vpd}   "0x15b3" "0x1021" ...
    bus/pci/devices/0000:01:00.1/{infiniband/rocep1s0f1/,net/enp1s0f1np1/}

Real-kernel formats, and where they were confirmed: the rate of an active
Spark port reads ``200 Gb/sec (4X HDR)`` and of a down one ``40 Gb/sec (4X
QDR)`` with state ``1: DOWN`` (DGX Spark / HP ZGX capture in
github.com/stondo/stondo.github.io content/posts/nvidia-peermem-gpudirect-rdma-dgx-spark.md);
ibstat prints the integer of the rate file (``Rate: 200``, ``Rate: 40`` on
down ports in every ConnectX-7 capture of tests/fixtures/captures/ibstat).

Unused GID table entries: ``gids/N`` exists for every N below the table size
and reads the zero GID, as on a real kernel. There, reading
``gid_attrs/types/N`` or ``gid_attrs/ndevs/N`` of such an entry fails with
EINVAL; a plain directory cannot fail a read with EINVAL, so the sim leaves
those two files out (a read fails with ENOENT instead; show_gids hides both
errors with 2>/dev/null). ``ndevs/N`` is also absent for a valid GID without a
netdev (InfiniBand ports), where the kernel fails the read too.

Entries of class/net and bus/pci/devices that the sim wrote carry a
``.spark-sim`` file (JSON with facts that only the stand-ins need: cable,
lanes); regeneration replaces those and leaves any other entry alone.
class/infiniband belongs to this module entirely and is swapped in whole.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import random
import re
import shutil
import tempfile
from typing import Any

from . import firmware
from . import state as statefile

MARKER = ".spark-sim"
MELLANOX_VENDOR = "0x15b3"
DEFAULT_GID_TABLE_LEN = 256
MAX_MOVED_V2_INDEX = 11          # apply_boot moves a v2 GID within 3..11
TYPE_V1 = "IB/RoCE v1"
TYPE_V2 = "RoCE v2"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
IPV4_GID_PREFIX = "0000:0000:0000:0000:0000:ffff:"

# The DGX Spark ConnectX-7: one ASIC, two QSFP cages, each cage reachable through
# two PCIe x4 "twins" (domains 0000 and 0002). Order = MAC offset.
SPARK_LAYOUT: tuple[tuple[str, str, str], ...] = (
    ("rocep1s0f0", "enp1s0f0np0", "0000:01:00.0"),
    ("rocep1s0f1", "enp1s0f1np1", "0000:01:00.1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0", "0002:01:00.0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1", "0002:01:00.1"),
)
SPARK_MAC_OUI = "4c:bb:47"
SPARK_FW = "28.45.4028"
SPARK_PART = "MCX750500B-0D00_Ax"
# Placeholder: no VPD capture of a Spark's on-board ConnectX-7 was found.
SPARK_VPD_ID = "NVIDIA ConnectX-7 200GbE QSFP112 adapter, DGX Spark"

PORT_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
PHYS_STATES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4,
               "LinkUp": 5, "LinkErrorRecovery": 6, "Phy Test": 7}
NODE_TYPES = {1: "CA", 2: "switch", 3: "router", 4: "RNIC", 5: "usNIC", 6: "usNIC UDP"}
# mlx5 reports an Ethernet speed as an InfiniBand width x speed pair.
RATE_BY_MBPS = {
    10000: "10 Gb/sec (1X QDR)",
    25000: "25 Gb/sec (1X EDR)",
    40000: "40 Gb/sec (4X QDR)",
    50000: "50 Gb/sec (2X EDR)",
    100000: "100 Gb/sec (4X EDR)",
    200000: "200 Gb/sec (4X HDR)",
    400000: "400 Gb/sec (4X NDR)",
}
DOWN_RATE = "40 Gb/sec (4X QDR)"


# --------------------------------------------------------------------------- GIDs

def format_gid(address: str) -> str:
    """An IPv6 address in the kernel's GID form (%pI6): ``fe80::1`` -> ``fe80:0000:...:0001``.

    Built from the bytes: ``exploded`` keeps an IPv4-mapped tail dotted on Python 3.13.
    """
    packed = ipaddress.IPv6Address(address).packed
    return ":".join(packed[i:i + 2].hex() for i in range(0, 16, 2))


def ipv4_gid(ipv4: str) -> str:
    """``192.168.100.1`` -> ``0000:0000:0000:0000:0000:ffff:c0a8:6401`` (IPv4-mapped)."""
    return format_gid("::ffff:%s" % ipaddress.IPv4Address(ipv4))


def eui64(mac: str) -> str:
    """The modified EUI-64 interface id of a MAC: ``4c:bb:47:2e:00:01`` -> ``4ebb:47ff:fe2e:0001``."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02
    raw = octets[:3] + [0xFF, 0xFE] + octets[3:]
    return ":".join("%02x%02x" % (raw[i], raw[i + 1]) for i in range(0, 8, 2))


def link_local_gid(mac: str) -> str:
    """``fe80:0000:0000:0000:<EUI-64 of the MAC>``: GID 0/1 of a RoCE port."""
    return "fe80:0000:0000:0000:" + eui64(mac)


def _gid(index: int, gid: str, gid_type: str, ndev: str | None) -> dict[str, Any]:
    return {"index": index, "gid": gid, "type": gid_type, "ndev": ndev}


def _filler_gids(netdev: str, mac: str, count: int) -> list[str]:
    """``count`` plausible IPv6 addresses of ``netdev`` (ULA /64s, EUI-64 host part)."""
    digest = hashlib.sha256(("spark-sim-ula:" + netdev).encode()).hexdigest()
    prefix = "fd%s:%s:%s" % (digest[:2], digest[2:6], digest[6:10])
    return ["%s:%04x:%s" % (prefix, subnet + 1, eui64(mac)) for subnet in range(count)]


def build_gid_table(netdev: str, mac: str, ipv4_pairs: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """The GID table the kernel would hold for ``netdev``.

    Index 0/1: link-local v1/v2. Each ``(ipv4, v1_index, v2_index)`` gets its
    IPv4-mapped pair there. Free indices from 2 up to the highest used one are
    filled with v1/v2 pairs of IPv6 addresses of the netdev; a free slot left
    without a partner stays empty (a hole, as after a deleted address).
    """
    link_local = link_local_gid(mac)
    table = {0: _gid(0, link_local, TYPE_V1, netdev), 1: _gid(1, link_local, TYPE_V2, netdev)}
    for ipv4, v1_index, v2_index in ipv4_pairs:
        gid = ipv4_gid(ipv4)
        for index, gid_type in ((v1_index, TYPE_V1), (v2_index, TYPE_V2)):
            if index < 2 or index in table:
                raise ValueError("GID index %d for %s on %s is taken or reserved" % (index, ipv4, netdev))
            table[index] = _gid(index, gid, gid_type, netdev)
    top = max(table)
    free = [index for index in range(2, top) if index not in table]
    pairs = [(free[i], free[i + 1]) for i in range(0, len(free) - 1, 2)]
    for (v1_index, v2_index), address in zip(pairs, _filler_gids(netdev, mac, len(pairs))):
        table[v1_index] = _gid(v1_index, address, TYPE_V1, netdev)
        table[v2_index] = _gid(v2_index, address, TYPE_V2, netdev)
    return [table[index] for index in sorted(table)]


def ipv4_pairs_of(gids: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """``[(ipv4, v1_index, v2_index)]`` of the IPv4-mapped GIDs of a table, by v2 index."""
    found: dict[str, dict[str, int]] = {}
    for entry in gids:
        gid = entry["gid"]
        if gid.startswith(IPV4_GID_PREFIX):
            key = "v2" if entry.get("type") == TYPE_V2 else "v1"
            found.setdefault(gid, {})[key] = int(entry["index"])
    pairs = []
    for gid, where in found.items():
        if "v1" in where and "v2" in where:
            ipv4 = str(ipaddress.IPv6Address(gid).ipv4_mapped)
            pairs.append((ipv4, where["v1"], where["v2"]))
    return sorted(pairs, key=lambda pair: pair[2])


# ------------------------------------------------------------------ default state

def _hostname_mac_base(hostname: str) -> list[int]:
    digest = hashlib.sha256(("spark-sim-mac:" + hostname).encode()).digest()
    oui = [int(part, 16) for part in SPARK_MAC_OUI.split(":")]
    return oui + [digest[0], digest[1], digest[2] & 0xFC]


def _mac(base: list[int], offset: int) -> str:
    value = int.from_bytes(bytes(base), "big") + offset
    return ":".join("%02x" % b for b in value.to_bytes(6, "big"))


def node_guid_of(mac: str) -> str:
    """mlx5 node GUID of a function: OUI, ``0300``, NIC part: ``0x4cbb4703002e0001``."""
    parts = mac.split(":")
    return "0x" + "".join(parts[:3]) + "0300" + "".join(parts[3:])


def _serial(hostname: str) -> str:
    digest = hashlib.sha256(("spark-sim-sn:" + hostname).encode()).hexdigest().upper()
    return "MT%s%s" % (digest[:4], digest[4:10])


def spark_vpd(serial: str) -> dict[str, Any]:
    """A Mellanox-style VPD: ID string, then PN, EC, V2 (part again, padded), SN, V0.

    This field order is what makes ``ibdev2netdev -v`` show the part number (the
    4th ``strings`` line is V2); see vpd_bytes().
    """
    return {"id": SPARK_VPD_ID,
            "fields": [["PN", SPARK_PART], ["EC", "A1"], ["V2", SPARK_PART.ljust(23)],
                       ["SN", serial.ljust(24)], ["V0", "PCIeGen5 x4"]]}


def _rail_indices(rail: dict[str, Any]) -> tuple[int, int]:
    v2_index = int(rail.get("gid_index_v2", 3))
    v1_index = int(rail.get("gid_index_v1", v2_index - 1))
    return v1_index, v2_index


def _spark_port(netdev: str, mac: str, rail: dict[str, Any] | None) -> dict[str, Any]:
    port: dict[str, Any] = {
        "port": 1,
        "netdev": netdev,
        "link_layer": "Ethernet",
        "state": "up" if rail else "down",
        "cable": bool(rail),
        "speed_mbps": 200000,
        "lanes": 4,
        "bw_gbps": 98.0,
        "mtu": int(rail.get("mtu", 9000)) if rail else 1500,
        "mac": mac,
        "gid_tbl_len": DEFAULT_GID_TABLE_LEN,
    }
    pairs = []
    if rail:
        port["ipv4"] = str(ipaddress.IPv4Address(rail["ipv4"]))
        v1_index, v2_index = _rail_indices(rail)
        pairs.append((port["ipv4"], v1_index, v2_index))
    port["gids"] = build_gid_table(netdev, mac, pairs)
    return port


def default_hcas(hostname: str, rails: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The four ConnectX-7 RDMA devices of a DGX Spark named ``hostname``.

    ``rails``: ``[{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1", "gid_index_v2": 3}]``
    (optional keys: ``gid_index_v1``, default v2-1; ``mtu``, default 9000). A
    rail's port is up with link-local GIDs at 0/1 and the IPv4 pair at
    v1/v2; the other ports are down with link-local GIDs only. MACs, GUIDs and
    the serial number derive from the hostname, so every node differs and
    every run of the same node is identical.
    """
    by_netdev = {str(rail["netdev"]): rail for rail in rails}
    unknown = sorted(set(by_netdev) - {netdev for _, netdev, _ in SPARK_LAYOUT})
    if unknown:
        raise ValueError("not a DGX Spark fabric netdev: %s" % ", ".join(unknown))
    base = _hostname_mac_base(hostname)
    system_guid = node_guid_of(_mac(base, 0))
    hcas = []
    for offset, (name, netdev, pci) in enumerate(SPARK_LAYOUT):
        mac = _mac(base, offset)
        hcas.append({
            "name": name,
            "node_type": 1,
            "ca_type": "MT4129",
            "pci_device_id": "0x1021",
            "fw": SPARK_FW,
            "hw_version": "0",
            "node_guid": node_guid_of(mac),
            "sys_image_guid": system_guid,
            "pci": pci,
            "vpd": spark_vpd(_serial(hostname)),
            "ports": [_spark_port(netdev, mac, by_netdev.get(netdev))],
        })
    return hcas


# -------------------------------------------------------------------------- boot

def _move_pairs(port: dict[str, Any], new_v2_of: dict[int, int]) -> list[str]:
    """Give every IPv4 pair of an up port the new v2 index ``new_v2_of[old v2]`` (v1 just below it)."""
    pairs = ipv4_pairs_of(port.get("gids", []))
    if port.get("state") != "up" or not pairs or not port.get("mac"):
        return []
    moved = []
    lines = []
    for ipv4, _, old_v2 in pairs:
        new_v2 = new_v2_of[old_v2]
        moved.append((ipv4, new_v2 - 1, new_v2))
        lines.append("RoCE v2 GID of %s moved from index %d to %d" % (ipv4, old_v2, new_v2))
    link_local = [e for e in port["gids"] if int(e["index"]) in (0, 1)]
    rebuilt = build_gid_table(port.get("netdev") or "", port["mac"], moved)
    port["gids"] = link_local + [e for e in rebuilt if int(e["index"]) >= 2]
    return lines


def _new_indices(state: dict[str, Any], rng: random.Random) -> dict[int, int]:
    """One move for the whole node: old v2 index -> new v2 index, the same on every port.

    The PCIe twins of a cage get their addresses the same way at boot, so their
    GID tables move in step (NCCL_IB_GID_INDEX is one index for every device).
    """
    olds = sorted({pair[2] for hca in state.get("hcas", []) for port in hca.get("ports", [])
                   if port.get("state") == "up" for pair in ipv4_pairs_of(port.get("gids", []))})
    used: set[int] = set()
    new_of: dict[int, int] = {}
    for old_v2 in olds:
        choices = [i for i in range(3, MAX_MOVED_V2_INDEX + 1)
                   if i not in olds and i not in used and i - 1 not in used and i + 1 not in used]
        new_v2 = rng.choice(choices)
        used.update((new_v2, new_v2 - 1))
        new_of[old_v2] = new_v2
    return new_of


def _recover_throttle(nic: dict[str, Any], cables_seated: bool) -> list[str]:
    if not nic.get("throttled") or not cables_seated or nic.get("throttle_persists"):
        return []
    nic["throttled"] = False
    return ["ConnectX-7: throttle cleared, links re-initialised with the cables seated"]


def apply_boot(state: dict[str, Any], rng: random.Random) -> list[str]:
    """What a reboot does to the ConnectX-7: returns one line per change.

    - ``state["boot"]["reshuffle_gids"]``: every up port's IPv4 GID pair moves
      (new v2 index in 3..11, never the old one; v1 just below; link-local
      stays at 0/1; IPv6 fillers are rebuilt around it), every port of the node
      by the same move (the twins keep one common index).
    - a throttled NIC (``state["nic"]["throttled"]``: every port of the node)
      recovers only if ``state["cables_seated"]`` and not ``throttle_persists``
      (that one needs an AC power cycle).
    """
    reshuffle = bool(state.get("boot", {}).get("reshuffle_gids"))
    cables_seated = bool(state.get("cables_seated", True))
    new_v2_of = _new_indices(state, rng) if reshuffle else {}
    lines: list[str] = []
    for hca in state.get("hcas", []):
        for port in hca.get("ports", []):
            changes = _move_pairs(port, new_v2_of) if reshuffle else []
            where = "%s port %s (%s)" % (hca["name"], port.get("port"), port.get("netdev"))
            lines += ["%s: %s" % (where, change) for change in changes]
    return lines + _recover_throttle(state.get("nic") or {}, cables_seated)


# ------------------------------------------------------------------ sysfs writer

def _write(path: str, text: str | bytes) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    with open(path, "wb") as handle:
        handle.write(data)


def _guid_text(guid: str) -> str:
    """``0x4cbb4703002e0001`` -> ``4cbb:4703:002e:0001`` (the node_guid file)."""
    digits = "%016x" % int(guid, 16)
    return ":".join(digits[i:i + 4] for i in range(0, 16, 4))


def _device_id(hca: dict[str, Any]) -> str:
    if hca.get("pci_device_id"):
        return str(hca["pci_device_id"])
    match = re.fullmatch(r"MT(\d+)", str(hca.get("ca_type", "")))
    return "0x%04x" % int(match.group(1)) if match else "0x0000"


def vpd_bytes(vpd: dict[str, Any]) -> bytes:
    """PCI VPD: ``0x82`` ID string, ``0x90`` VPD-R keyword fields + ``RV`` checksum, ``0x78`` end.

    ``vpd = {"id": "...", "fields": [["PN", "..."], ...]}``; values are used
    verbatim (keep them under 32 bytes so their length byte is not printable).
    """
    ident = str(vpd.get("id", "")).encode()
    fields = b"".join(str(kw).encode()[:2] + bytes([len(str(value).encode())]) + str(value).encode()
                      for kw, value in vpd.get("fields", []))
    head = (b"\x82" + len(ident).to_bytes(2, "little") + ident
            + b"\x90" + (len(fields) + 4).to_bytes(2, "little") + fields + b"RV\x01")
    return head + bytes([(-sum(head)) & 0xFF]) + b"\x78"


def _pci_resource(pci: str) -> str:
    digest = int(hashlib.sha256(pci.encode()).hexdigest()[:6], 16)
    start = 0x0000_0800_0000_0000 + digest * 0x0200_0000
    return ("0x%016x 0x%016x 0x000000000014220c\n" % (start, start + 0x01FF_FFFF)
            + "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 12)


def _port_state(port: dict[str, Any]) -> tuple[str, str, str]:
    """(state, phys_state, rate) file contents of a port."""
    up = port.get("state") == "up"
    name = str(port.get("port_state") or ("ACTIVE" if up else "DOWN")).upper()
    phys = str(port.get("phys_state") or ("LinkUp" if up else "Disabled"))
    rate = port.get("rate") or (RATE_BY_MBPS.get(int(port.get("speed_mbps", 0)), DOWN_RATE) if up else DOWN_RATE)
    if name not in PORT_STATES or phys not in PHYS_STATES:
        raise ValueError("port %s: unknown port_state %r or phys_state %r" % (port.get("port"), name, phys))
    return "%d: %s\n" % (PORT_STATES[name], name), "%d: %s\n" % (PHYS_STATES[phys], phys), rate + "\n"


def _check_gid(entry: dict[str, Any], table_len: int, where: str) -> None:
    if not re.fullmatch(r"([0-9a-f]{4}:){7}[0-9a-f]{4}", str(entry["gid"])):
        raise ValueError("%s: GID %r is not 8 groups of 4 lower-case hex digits" % (where, entry["gid"]))
    if not 0 <= int(entry["index"]) < table_len:
        raise ValueError("%s: GID index %s outside the table (size %d)" % (where, entry["index"], table_len))


def _validate(hcas: list[dict[str, Any]]) -> None:
    """Refuse a bad state before anything on disk changes."""
    names = [hca["name"] for hca in hcas]
    if len(set(names)) != len(names):
        raise ValueError("RDMA device names repeat: %s" % ", ".join(names))
    for hca in hcas:
        for port in hca.get("ports", []):
            where = "%s port %s" % (hca["name"], port.get("port"))
            _port_state(port)
            table_len = int(port.get("gid_tbl_len", DEFAULT_GID_TABLE_LEN))
            indices = [int(entry["index"]) for entry in port.get("gids", [])]
            if len(set(indices)) != len(indices):
                raise ValueError("%s: GID indices repeat" % where)
            for entry in port.get("gids", []):
                _check_gid(entry, table_len, where)


def _write_port(port_dir: str, port: dict[str, Any]) -> None:
    for sub in ("gids", os.path.join("gid_attrs", "types"), os.path.join("gid_attrs", "ndevs")):
        os.makedirs(os.path.join(port_dir, sub))
    state_text, phys_text, rate_text = _port_state(port)
    ethernet = port.get("link_layer", "Ethernet") == "Ethernet"
    files = {
        "state": state_text, "phys_state": phys_text, "rate": rate_text,
        "link_layer": "%s\n" % port.get("link_layer", "Ethernet"),
        "lid": "0x%x\n" % int(port.get("lid", 0)),
        "lid_mask_count": "%d\n" % int(port.get("lmc", 0)),
        "sm_lid": "0x%x\n" % int(port.get("sm_lid", 0)),
        "sm_sl": "%d\n" % int(port.get("sm_sl", 0)),
        "cap_mask": "0x%08x\n" % int(str(port.get("cap_mask", "0x00010000" if ethernet else "0x2651e84a")), 16),
    }
    for name, text in files.items():
        _write(os.path.join(port_dir, name), text)
    table_len = int(port.get("gid_tbl_len", DEFAULT_GID_TABLE_LEN))
    by_index = {int(entry["index"]): entry for entry in port.get("gids", [])}
    for index in range(table_len):
        entry = by_index.get(index)
        _write(os.path.join(port_dir, "gids", str(index)), (entry["gid"] if entry else ZERO_GID) + "\n")
        if entry is None or entry["gid"] == ZERO_GID:
            continue
        _write(os.path.join(port_dir, "gid_attrs", "types", str(index)), "%s\n" % entry.get("type", TYPE_V1))
        if entry.get("ndev"):
            _write(os.path.join(port_dir, "gid_attrs", "ndevs", str(index)), "%s\n" % entry["ndev"])


def _pci_link(pci: str) -> str:
    return os.path.join("..", "..", "..", "bus", "pci", "devices", pci)


def _write_hca(class_dir: str, hca: dict[str, Any]) -> None:
    dev_dir = os.path.join(class_dir, hca["name"])
    os.makedirs(os.path.join(dev_dir, "ports"))
    node_type = int(hca.get("node_type", 1))
    files = {
        "node_type": "%d: %s\n" % (node_type, NODE_TYPES.get(node_type, "unknown")),
        "hca_type": "%s\n" % hca.get("ca_type", ""),
        "fw_ver": "%s\n" % hca.get("fw", ""),
        "hw_rev": "%s\n" % hca.get("hw_version", "0"),
        "node_guid": _guid_text(str(hca.get("node_guid", "0x0"))) + "\n",
        "sys_image_guid": _guid_text(str(hca.get("sys_image_guid", hca.get("node_guid", "0x0")))) + "\n",
    }
    if hca.get("board_id"):
        files["board_id"] = "%s\n" % hca["board_id"]
    for name, text in files.items():
        _write(os.path.join(dev_dir, name), text)
    if hca.get("pci"):
        os.symlink(_pci_link(hca["pci"]), os.path.join(dev_dir, "device"))
    for port in hca.get("ports", []):
        _write_port(os.path.join(dev_dir, "ports", str(port["port"])), port)


def _ipoib_address(port: dict[str, Any]) -> str:
    gid0 = next((e["gid"] for e in port.get("gids", []) if int(e["index"]) == 0), ZERO_GID)
    raw = bytes([0x00, 0x00, 0x10, 0x87]) + ipaddress.IPv6Address(gid0).packed
    return ":".join("%02x" % b for b in raw)


def _net_entry(port: dict[str, Any], pci: str | None, ifindex: int) -> dict[str, Any]:
    """Files of class/net/<netdev> (and the marker facts) for one port."""
    up = port.get("state") == "up"
    infiniband = port.get("link_layer") == "InfiniBand"
    return {
        "files": {
            "address": (_ipoib_address(port) if infiniband else str(port.get("mac", "00:00:00:00:00:00"))) + "\n",
            "addr_len": "20\n" if infiniband else "6\n",
            "type": "32\n" if infiniband else "1\n",
            "carrier": "1\n" if up else "0\n",
            "operstate": "up\n" if up else "down\n",
            "mtu": "%d\n" % int(port.get("mtu", 2044 if infiniband else 1500)),
            "speed": "%d\n" % (int(port.get("speed_mbps", 0)) if up else -1),
            "dev_id": "0x0\n",
            "dev_port": "%d\n" % (int(port.get("port", 1)) - 1),
            "ifindex": "%d\n" % ifindex,
        },
        "pci": pci,
        "facts": {
            "cable": bool(port.get("cable", up)),
            "lanes": int(port.get("lanes", 4)),
            "link_ext_state": port.get("link_ext_state"),
        },
    }


def _replace_owned(parent: str, entries: dict[str, dict[str, Any]]) -> None:
    """Make the sim-owned entries of ``parent`` exactly ``entries`` (others untouched)."""
    os.makedirs(parent, exist_ok=True)
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if os.path.isdir(path) and not os.path.islink(path) and os.path.exists(os.path.join(path, MARKER)):
            shutil.rmtree(path)
    for name, entry in entries.items():
        path = os.path.join(parent, name)
        if os.path.lexists(path):
            raise ValueError("%s exists and was not written by spark-sim" % path)
        os.makedirs(path)
        for sub in entry.get("dirs", []):
            os.makedirs(os.path.join(path, sub))
        for file_name, text in entry.get("files", {}).items():
            _write(os.path.join(path, file_name), text)
        if entry.get("pci"):
            os.symlink(_pci_link(entry["pci"]), os.path.join(path, "device"))
        _write(os.path.join(path, MARKER), json.dumps(entry.get("facts", {}), sort_keys=True) + "\n")


def _swap_in(new_dir: str, target: str) -> None:
    """Replace ``target`` by ``new_dir`` with two renames (readers never see a half tree)."""
    if os.path.lexists(target):
        old = tempfile.mkdtemp(prefix=".%s.old-" % os.path.basename(target), dir=os.path.dirname(target))
        os.rename(target, os.path.join(old, "tree"))
        os.rename(new_dir, target)
        shutil.rmtree(old)
    else:
        os.rename(new_dir, target)


def _pci_entries(hcas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for hca in hcas:
        pci = hca.get("pci")
        if not pci:
            continue
        entry = entries.setdefault(pci, {"dirs": [], "files": {
            "vendor": "%s\n" % hca.get("pci_vendor_id", MELLANOX_VENDOR),
            "device": "%s\n" % _device_id(hca),
            "resource": _pci_resource(pci),
            # the PCIe link of the function (pci_speed_string / pcie_link_width): Gen5 x4 on a Spark;
            # "pcie_link_width": 2 models the early GX10 BIOS that wired the second controller at x2
            "current_link_speed": "%s\n" % hca.get("pcie_link_speed", "32.0 GT/s PCIe"),
            "current_link_width": "%d\n" % int(hca.get("pcie_link_width", 4)),
            "max_link_speed": "32.0 GT/s PCIe\n",
            "max_link_width": "4\n",
        }})
        if hca.get("vpd"):
            entry["files"]["vpd"] = vpd_bytes(hca["vpd"])
        entry["dirs"].append(os.path.join("infiniband", hca["name"]))
        entry["dirs"] += [os.path.join("net", p["netdev"]) for p in hca.get("ports", []) if p.get("netdev")]
    return entries


def _net_entries(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for hca in state.get("hcas", []):
        for port in hca.get("ports", []):
            netdev = port.get("netdev")
            if netdev and netdev not in entries:
                entries[netdev] = _net_entry(port, hca.get("pci"), len(entries) + 3)
    return entries


def write_sysfs(state: dict[str, Any], root: str) -> None:
    """(Re)generate the stand-in sysfs under ``root`` from ``state["hcas"]``.

    class/infiniband is rebuilt beside the old one and swapped in; the
    sim-owned entries of class/net and bus/pci/devices are replaced. Nothing
    of an earlier state survives (no leftover devices, ports or GIDs).
    """
    hcas = state.get("hcas", [])
    _validate(hcas)
    _replace_owned(os.path.join(root, "bus", "pci", "devices"), _pci_entries(hcas))
    _replace_owned(os.path.join(root, "class", "net"), _net_entries(state))
    class_dir = os.path.join(root, "class")
    for name in os.listdir(class_dir):
        if name.startswith((".infiniband.new-", ".infiniband.old-")):
            shutil.rmtree(os.path.join(class_dir, name))  # an interrupted earlier run
    new_dir = tempfile.mkdtemp(prefix=".infiniband.new-", dir=class_dir)
    try:
        for hca in hcas:
            _write_hca(new_dir, hca)
        os.chmod(new_dir, 0o755)
        _swap_in(new_dir, os.path.join(class_dir, "infiniband"))
    except BaseException:
        shutil.rmtree(new_dir, ignore_errors=True)
        raise
    _write_esrt(state, root)  # the rest of the stand-in sysfs: the system firmware's ESRT


def _write_esrt(state: dict[str, Any], root: str) -> None:
    """<root>/firmware/efi/esrt from sparksim.firmware, root-only files, swapped in whole."""
    parent = os.path.join(root, "firmware", "efi")
    os.makedirs(parent, exist_ok=True)
    new_dir = tempfile.mkdtemp(prefix=".esrt.new-", dir=parent)
    try:
        for rel, text in firmware.esrt_files(state).items():
            path = os.path.join(new_dir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write(path, text)
            os.chmod(path, 0o400)
        os.chmod(new_dir, 0o755)
        _swap_in(new_dir, os.path.join(parent, "esrt"))
    except BaseException:
        shutil.rmtree(new_dir, ignore_errors=True)
        raise


# ------------------------------------------------------- helpers for the stand-ins

def resolve_sysfs_root() -> str:
    """SPARK_SIM_SYSFS, else the state's sysfs_root, else /var/lib/spark-sim/sys."""
    if os.environ.get("SPARK_SIM_SYSFS"):
        return os.environ["SPARK_SIM_SYSFS"]
    try:
        return statefile.sysfs_root(statefile.load())
    except (OSError, ValueError):
        return statefile.DEFAULT_SYSFS_ROOT


def read_sysfs(path: str) -> str | None:
    """A sysfs file's text without trailing newlines (as ``$(cat f)``), None if unreadable."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace").rstrip("\n")
    except OSError:
        return None


def collation_is_c(environ: dict[str, str] | None = None) -> bool:
    """True when LC_ALL / LC_COLLATE / LANG (first set one) selects C or POSIX collation."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_COLLATE", "LANG"):
        value = env.get(name)
        if value:
            return value.split(".")[0] in ("C", "POSIX")
    return True


def _natural_key(name: str) -> tuple[str, tuple[int, ...], str]:
    alnum = [c for c in name if c.isalnum()]
    return "".join(alnum).lower(), tuple(0 if c.islower() or not c.isalpha() else 1 for c in alnum), name


def ls_order(names: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """Names in the order ``ls`` (and a bash glob) lists them.

    C/POSIX (or no locale set): byte order, ``roceP2p1s0f0`` before
    ``rocep1s0f0``. Any other locale: glibc's en_US-style collation, which
    ignores case and punctuation first (``rocep1s0f0``, ``rocep1s0f1``,
    ``roceP2p1s0f0``), lower case before upper case on ties. It is emulated
    rather than asked of glibc so a node without that locale installed still
    lists the way a DGX OS shell (en_US.UTF-8) does.
    """
    if collation_is_c(environ):
        return sorted(names, key=lambda n: n.encode())
    return sorted(names, key=_natural_key)


def strings(data: bytes, min_len: int = 4) -> list[str]:
    """GNU ``strings``: runs of at least ``min_len`` printable ASCII bytes (and TAB)."""
    return [m.decode("ascii") for m in re.findall(rb"[\t\x20-\x7e]{%d,}" % min_len, data)]
