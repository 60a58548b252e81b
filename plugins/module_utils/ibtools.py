# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for ``ibdev2netdev`` and ``ibstat`` output (stdlib only, pure).

ibdev2netdev (mlnx-tools), plain and ``-v``::

    rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)
    0000:4b:00.0 mlx5_2 (MT4119 - MCX515A-CCAT) CX515A - ConnectX-5 QSFP28 fw 16.27.1016 port 1 (ACTIVE) ==> ens6 (Up)

``(Up)``/``(Down)`` is the netdev's carrier; ``(ACTIVE)`` in ``-v`` is the
RDMA port state. Two RDMA devices can map to the same netdev: rows are kept
as a list, never folded into a dict keyed by netdev.

ibstat (infiniband-diags), one block per CA::

    CA 'mlx5_0'
            CA type: MT4129
            Number of ports: 1
            Firmware version: 28.41.1000
            ...
            Port 1:
                    State: Active
                    Physical state: LinkUp
                    Rate: 400
                    ...
                    Link layer: Ethernet

``ibpanic:`` lines report errors and can follow valid blocks or replace them.
A down port reports a placeholder rate (40): gate on State first.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_CLEAN = re.compile(u"[\u00a0\r]")
_IBDEV_ROW = re.compile(
    r"(?P<head>.*?)\bport\s+(?P<port>\d+)\s*(?:\((?P<port_state>[A-Za-z_]+)\s*\)\s*)?==>\s*(?P<netdev>\S+)\s*\((?P<carrier>Up|Down)\)")
_PCI = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_CA = re.compile(r"^\s*CA\s+'(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s*Port\s+(?P<port>\d+):\s*$")
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
_PANIC = re.compile(r"ibpanic:\s*(?:\[\d+\]\s*)?(?P<msg>.*\S)")


def _lines(text):
    return [_CLEAN.sub(u" ", line).rstrip() for line in (text or u"").split(u"\n")]


def parse_ibdev2netdev(text):
    """Rows of ``ibdev2netdev [-v]`` output.

    Returns a list of dicts: device, port (int), netdev, carrier ('Up'/'Down'),
    port_state ('ACTIVE', 'DOWN', ... or None without -v), pci (or None).
    Lines that are not rows (prompts, comments) are ignored.
    """
    rows = []
    for line in _lines(text):
        match = _IBDEV_ROW.search(line)
        if not match:
            continue
        head = match.group("head").split()
        pci = None
        if head and _PCI.match(head[0]):
            pci = head.pop(0)
        if not head:
            continue
        rows.append({
            "device": head[0],
            "port": int(match.group("port")),
            "netdev": match.group("netdev"),
            "carrier": match.group("carrier"),
            "port_state": match.group("port_state").upper() if match.group("port_state") else None,
            "pci": pci,
        })
    return rows


def _number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None


def parse_ibstat(text):
    """CAs and errors of ``ibstat`` output.

    Returns ``{"cas": {name: {"ca_type", "ports_count", "firmware", "node_guid",
    "ports": {port: {"state", "physical_state", "rate", "link_layer", ...}}}},
    "errors": [ibpanic messages]}``. Field names are the ibstat labels in
    snake case (``Physical state`` -> ``physical_state``); ``rate`` is an int.
    """
    cas = {}
    errors = []
    ca = None
    port = None
    for line in _lines(text):
        panic = _PANIC.search(line)
        if panic:
            errors.append(panic.group("msg"))
            ca = port = None
            continue
        match = _CA.match(line)
        if match:
            ca = {"ports": {}}
            cas[match.group("name")] = ca
            port = None
            continue
        if ca is None:
            continue
        match = _PORT.match(line)
        if match:
            port = {}
            ca["ports"][int(match.group("port"))] = port
            continue
        match = _FIELD.match(line)
        if not match:
            continue
        key = match.group("key").strip().lower().replace(" ", "_")
        value = match.group("value")
        if port is not None and key not in ("ca_type", "number_of_ports", "firmware_version"):
            port[key] = _number(value) if key in ("rate", "base_lid", "lmc", "sm_lid") else value
        else:
            ca[key] = _number(value) if key == "number_of_ports" else value
    for ca in cas.values():
        if "number_of_ports" in ca:
            ca["ports_count"] = ca.pop("number_of_ports")
        if "firmware_version" in ca:
            ca["firmware"] = ca.pop("firmware_version")
    return {"cas": cas, "errors": errors}


def rail_link_status(rail, ibdev_rows, ibstat, mtu=None, speed_mbps=None):
    """What the tools say about one rail ``{"netdev", "ipv4"}``.

    Returns a dict with device, port, carrier, state, physical_state, rate,
    link_layer, mtu, speed_mbps, firmware (ibstat's) and ``problems`` (messages; empty when the
    link looks healthy). Looking healthy is not enough: a stale-initialised
    link passes all of these and still moves ~13 Gb/s (see the bandwidth check).
    """
    netdev = rail.get("netdev")
    status = {"netdev": netdev, "ipv4": rail.get("ipv4"), "device": None, "port": None, "carrier": None,
              "state": None, "physical_state": None, "rate": None, "link_layer": None,
              "mtu": mtu, "speed_mbps": speed_mbps, "firmware": None, "problems": []}
    rows = [r for r in ibdev_rows if r["netdev"] == netdev]
    if not rows:
        seen = ", ".join("%s->%s" % (r["device"], r["netdev"]) for r in ibdev_rows) or "no rows"
        status["problems"].append("netdev %s is not an RDMA netdev (ibdev2netdev lists %s)" % (netdev, seen))
        return status
    if len(rows) > 1:
        status["problems"].append("netdev %s is claimed by several RDMA devices (%s)"
                                  % (netdev, ", ".join(r["device"] for r in rows)))
    row = rows[0]
    status.update(device=row["device"], port=row["port"], carrier=row["carrier"],
                  firmware=ibstat.get("cas", {}).get(row["device"], {}).get("firmware"))
    if row["carrier"] != "Up":
        status["problems"].append("%s (%s port %d) has no carrier (ibdev2netdev says Down): cable seated? peer up?"
                                  % (netdev, row["device"], row["port"]))
    port = ibstat.get("cas", {}).get(row["device"], {}).get("ports", {}).get(row["port"])
    if port is None:
        errors = "; ".join(ibstat.get("errors", [])) or "no block for it"
        status["problems"].append("ibstat has no port %d for %s (%s)" % (row["port"], row["device"], errors))
        return status
    status.update(state=port.get("state"), physical_state=port.get("physical_state"),
                  rate=port.get("rate"), link_layer=port.get("link_layer"))
    if port.get("state") != "Active" or port.get("physical_state") != "LinkUp":
        status["problems"].append("%s port %d is %s / %s (ibstat), expected Active / LinkUp"
                                  % (row["device"], row["port"], port.get("state"), port.get("physical_state")))
    return status


_SPEED = re.compile(r"^\s*Speed:\s*(?P<speed>\d+)\s*Mb/s\s*$")
_LINK = re.compile(r"^\s*Link detected:\s*(?P<link>yes|no)\s*$")


def parse_ethtool(text):
    """``ethtool <netdev>``: ``{"speed_mbps": 200000 or None, "link_detected": True/False/None}``."""
    result = {"speed_mbps": None, "link_detected": None}
    for line in _lines(text):
        match = _SPEED.match(line)
        if match:
            result["speed_mbps"] = int(match.group("speed"))
        match = _LINK.match(line)
        if match:
            result["link_detected"] = match.group("link") == "yes"
    return result
