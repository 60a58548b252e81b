# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric health between the nodes: PCIe link gates, the mlx5 slot-power line, the
node-to-node measurement plan and the reboot-order decision (stdlib only, pure).

Why node to node: an RDMA loopback (destination GID = source GID) never reaches
the port's physical link, so the stale initialisation of a QSFP cabled while the
node ran (~13 Gb/s instead of ~98 per PCIe twin) can stay invisible to it. NVIDIA
measures node to node (dgx-spark-playbooks PR #108, check-connectx-bandwidth: a
server on one node, ``ib_write_bw ... -F --report_gbits -q 4 -D 5`` against it
from the other, after ethtool Speed 200000Mb/s and PCIe 32.0 GT/s x4; the 80 Gb/s
threshold is of that 4-queue-pair run), and one figure cannot tell which end is at
fault: hence the reboot order below. Each figure names its queue pairs.

sysfs of the twin's PCI function (``/sys/class/net/<netdev>/device/``)::

    current_link_speed   32.0 GT/s PCIe      (kernel pci_speed_string; older kernels: "32 GT/s")
    current_link_width   4                    (2: the early GX10 BIOS wiring of the second controller)

The mlx5 kernel line (information only: it prints on healthy Sparks too)::

    mlx5_core 0002:01:00.0: mlx5_pcie_event:326:(pid 3202): Detected insufficient power on the PCIe slot (27W).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

HEALTHY_PCIE_GTS = 32.0
HEALTHY_PCIE_WIDTH = 4
GX10_EARLY_BIOS_WIDTH = 2

_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
_SLOT_POWER = re.compile(
    r"mlx5_core\s+(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*:.*?"
    r"Detected insufficient power on the PCIe slot \((?P<watts>\d+)\s*W\)")

OPERATOR_ACTION = "operator action required: power both nodes off, AC removed for at least 60 s"


def pcie_link_check(netdev, pci, speed_text, width_text):
    """Problems and warnings of one twin's PCIe link from its sysfs files.

    >>> pcie_link_check('enP2p1s0f1np1', '0002:01:00.1', '32.0 GT/s PCIe', '2')[0]
    []
    """
    problems = []
    warnings = []
    where = "%s (PCI %s)" % (netdev, pci or "unknown")
    if speed_text is None or width_text is None:
        problems.append("%s: cannot read current_link_speed/current_link_width in sysfs" % where)
        return problems, warnings
    speed = _SPEED.match(speed_text)
    try:
        width = int(width_text.strip())
    except ValueError:
        width = None
    if speed is None or float(speed.group(1)) != HEALTHY_PCIE_GTS:
        problems.append("%s: PCIe link speed is %r, expected 32.0 GT/s (Gen5)" % (where, speed_text.strip()))
    if width == GX10_EARLY_BIOS_WIDTH:
        warnings.append("%s: PCIe link width x2, expected x4: the early GX10 BIOS wires the second controller at x2 "
                        "(about half the twin's bandwidth); a BIOS update (fwupdmgr) restores x4" % where)
    elif width != HEALTHY_PCIE_WIDTH:
        problems.append("%s: PCIe link width is %r, expected 4" % (where, width_text.strip()))
    return problems, warnings


def slot_power_lines(text):
    """``{pci: "27W"}`` from kernel log text: the mlx5 "insufficient power on the PCIe slot" lines."""
    found = {}
    for line in (text or "").splitlines():
        match = _SLOT_POWER.search(line)
        if match:
            found[match.group("pci").lower()] = match.group("watts") + "W"
    return found


def _measure(client, client_rail, server, server_rail, rails, mtus):
    mine, theirs = rails[client][client_rail], rails[server][server_rail]
    entry = {
        "rail": client_rail, "netdev": mine["netdev"], "client": client, "server": server,
        "server_ipv4": theirs["ipv4"], "client_device": mine["device"], "client_gid": mine["indices"][0],
        "server_device": theirs["device"], "server_gid": theirs["indices"][0], "server_rail": server_rail,
        "server_netdev": theirs["netdev"],
    }
    if mtus is not None:
        entry["client_mtu"] = (mtus.get(client) or {}).get(mine["netdev"])
        entry["server_mtu"] = (mtus.get(server) or {}).get(theirs["netdev"])
    return entry


def bandwidth_plan(head, workers, rails, topology=None, mtus=None):
    """The node-to-node measurements.

    ``rails``: ``{host: [{"netdev", "ipv4", "device", "indices": [...]}, ...]}`` (roce_gid_facts' rails, rail order).
    ``topology``: the ``preflight_topology`` fact (plugins/module_utils/topology.py). With it, every link is measured in
    both directions: in the ``direct`` shape each cable (its two rails, whatever their indices); behind a ``switch``,
    per rail, a ring over the nodes in rank order (node k sends to node k+1), so every node's port to the switch is
    measured sending and receiving with N measurements per rail, not N*(N-1) (a throttled port is the fault: it shows
    in both of its measurements, each healthy port in at most one). Without it: per rail, every worker against the
    head and the head against the first worker (a pair: both directions of every rail).
    ``mtus``: ``{host: {netdev: mtu}}``; each measurement then carries ``client_mtu`` and ``server_mtu``
    (:func:`mtu_mismatches`).
    Returns ``[{"rail", "netdev", "client", "server", "server_ipv4", "server_rail", "server_netdev", "client_device",
    "client_gid", "server_device", "server_gid"}, ...]``.
    """
    nodes = [head] + [w for w in workers if w != head]
    if topology:
        plan = []
        if topology.get("shape") == "switch":
            count = min(len(rails.get(host) or []) for host in nodes)
            ring = [h for h in topology["hosts"] if h in nodes]
            for index in range(count):
                pairs = [(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))] if len(ring) > 1 else []
                plan.extend(_measure(a, index, b, index, rails, mtus) for a, b in pairs)
            return plan
        for link in topology.get("links") or []:
            if link["a"] in nodes and link["b"] in nodes:
                plan.append(_measure(link["a"], link["a_rail"], link["b"], link["b_rail"], rails, mtus))
                plan.append(_measure(link["b"], link["b_rail"], link["a"], link["a_rail"], rails, mtus))
        return plan
    pairs = [(worker, head) for worker in workers]
    if workers:
        pairs.append((head, workers[0]))
    count = min(len(rails.get(host) or []) for host in nodes)
    plan = []
    for index in range(count):
        for client, server in pairs:
            plan.append(_measure(client, index, server, index, rails, mtus))
    return plan


def mtu_mismatches(plan):
    """One message per measured link whose two ends have different MTUs (RoCE takes the smaller one silently: a 4-node
    cluster ran at RoCE MTU 1024 unnoticed, 0xSero/local-ai-registry PR #55).

    >>> mtu_mismatches([{"client": "a", "netdev": "x", "client_mtu": 9000, "server": "b", "server_netdev": "y",
    ...                  "server_mtu": 1500}])
    ['a x MTU 9000, b y MTU 1500: expected the same MTU on both ends of the link']
    """
    seen = set()
    out = []
    for m in plan:
        key = tuple(sorted([(m["client"], m["netdev"]), (m["server"], m.get("server_netdev"))]))
        if key in seen or m.get("client_mtu") is None or m.get("server_mtu") is None or m["client_mtu"] == m["server_mtu"]:
            continue
        seen.add(key)
        out.append("%s %s MTU %s, %s %s MTU %s: expected the same MTU on both ends of the link"
                   % (m["client"], m["netdev"], m["client_mtu"], m["server"], m.get("server_netdev"), m["server_mtu"]))
    return out


def _label(measure):
    return "rail %d (%s) %s -> %s" % (measure["rail"], measure["netdev"], measure["client"], measure["server"])


def bandwidth_verdict(results, healthy_gbps, head, workers, rebooted=(), reboot_ok=False):
    """What to do after one round of measurements.

    ``results``: the plan's items with ``gbps`` (None when the measurement failed, with ``error``) and
    ``qps`` (the queue pairs perftest reported, when known).
    ``rebooted``: nodes already rebooted for this fault (their boot is the one a throttle reboot started).

    Returns ``{"action": "ok" | "reboot" | "reboot_needed" | "operator" | "error", "reboot": host or None,
    "slow": [labels], "report": "rail 0 (enp1s0f1np1) a -> b 13.10 Gb/s (4 QPs), ...", "msg": text}``.

    Order: a node whose every link is slow first (with N nodes that names the throttled one), then the
    node with the most slow links, then workers in inventory order before the head (one figure cannot
    tell which end of a pair is at fault; the head, serving rank 0, goes last). A node is never
    chosen twice for the same fault: with every slow node rebooted once, the answer is "operator".
    """
    nodes = [head] + [w for w in workers if w != head]
    report = ", ".join("%s %s Gb/s%s" % (_label(r), "failed" if r.get("gbps") is None else "%.2f" % r["gbps"],
                                         " (%d QPs)" % r["qps"] if r.get("qps") else "")
                       for r in results)
    slow = [r for r in results if r.get("gbps") is None or r["gbps"] < healthy_gbps]
    verdict = {"action": "ok", "reboot": None, "slow": [_label(r) for r in slow], "report": report, "msg": ""}
    failed = [r for r in results if r.get("gbps") is None]
    if failed:
        # a measurement that could not run is no throttle: never a reboot for it
        verdict.update(action="error", msg="could not measure %s" % "; ".join(
            "%s: %s" % (_label(r), r.get("error") or "no figure") for r in failed))
        return verdict
    if not slow:
        return verdict
    links = {}
    for r in results:
        key = frozenset((r["client"], r["server"]))
        links[key] = links.get(key, False) or r in slow
    score = {}
    for node in nodes:
        mine = [is_slow for key, is_slow in links.items() if node in key]
        score[node] = (bool(mine) and all(mine), sum(1 for s in mine if s))
    order = sorted([n for n in nodes if score[n][1] > 0],
                   key=lambda n: (not score[n][0], -score[n][1], n == head, nodes.index(n)))
    candidates = [n for n in order if n not in rebooted]
    figures = "; ".join("%s: %s" % (_label(r), "no figure" if r.get("gbps") is None else "%.2f Gb/s" % r["gbps"])
                        for r in slow)
    if not candidates:
        verdict.update(action="operator", msg=(
            "%s: still slow after %s rebooted once with the cables seated (healthy >= %s Gb/s): %s, then re-run."
            % (figures, " and ".join(n for n in order), healthy_gbps, OPERATOR_ACTION)))
        return verdict
    if not reboot_ok:
        verdict.update(action="reboot_needed", reboot=candidates[0], msg=(
            "%s (healthy >= %s Gb/s): the stale-initialisation signature of a QSFP cabled while a node was running. "
            "Either reboot the nodes one at a time with the cables seated (%s first), or set nic_reboot_ok=true to "
            "let the nic role do it (one node at a time, each at most once); if that does not clear it, %s."
            % (figures, healthy_gbps, candidates[0], OPERATOR_ACTION)))
        return verdict
    verdict.update(action="reboot", reboot=candidates[0],
                   msg="%s (healthy >= %s Gb/s): rebooting %s with the cables seated" % (figures, healthy_gbps, candidates[0]))
    return verdict
