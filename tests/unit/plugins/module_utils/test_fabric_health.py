# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/fabric_health.py: PCIe gates, the slot-power line, the plan, the reboot order."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import topology as topo
from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric_health import (
    OPERATOR_ACTION,
    bandwidth_plan,
    bandwidth_verdict,
    mtu_mismatches,
    pcie_link_check,
    slot_power_lines,
)

H, W, W2 = "spark-head", "spark-worker", "spark-worker2"


def rails(host_octet):
    return [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.%d" % host_octet, "device": "rocep1s0f1", "indices": [3]},
            {"netdev": "enP2p1s0f1np1", "ipv4": "192.168.101.%d" % host_octet, "device": "roceP2p1s0f1", "indices": [3]}]


def test_plan_for_a_pair_measures_both_directions_of_every_rail():
    plan = bandwidth_plan(H, [W], {H: rails(1), W: rails(2)})
    assert [(m["rail"], m["client"], m["server"], m["server_ipv4"]) for m in plan] == [
        (0, W, H, "192.168.100.1"), (0, H, W, "192.168.100.2"),
        (1, W, H, "192.168.101.1"), (1, H, W, "192.168.101.2")]
    assert plan[2]["client_device"] == "roceP2p1s0f1" and plan[2]["server_gid"] == 3


def test_plan_for_n_nodes_every_worker_with_the_head_and_the_head_with_one_worker():
    plan = bandwidth_plan(H, [W, W2], {H: rails(1)[:1], W: rails(2)[:1], W2: rails(3)[:1]})
    assert [(m["client"], m["server"]) for m in plan] == [(W, H), (W2, H), (H, W)]


def cluster(addrs, shape):
    """A topology and its roce rails: addrs {host: [rail0 ipv4, rail1 ipv4]} (the head first)."""
    hosts = list(addrs)
    hvars = dict((h, {"dgxspark_fabric_rails": [{"netdev": ("enp1s0f1np1", "enP2p1s0f1np1")[i], "ipv4": a}
                                                for i, a in enumerate(v)]}) for h, v in addrs.items())
    if shape == "direct" and len(hosts) > 2:  # a triangle bootstraps on the LAN (topology.py)
        for i, h in enumerate(hosts):
            hvars[h]["dgxspark_bootstrap"] = {"netdev": "enP7s7", "ipv4": "192.168.1.%d" % (11 + i)}
    t = topo.cluster_topology({"spark_head": hosts[:1], "spark_workers": hosts[1:]}, hvars, shape=shape)
    roce = dict((h, [{"netdev": r["netdev"], "ipv4": r["ipv4"], "device": ("rocep1s0f1", "roceP2p1s0f1")[r["index"]],
                      "indices": [3]} for r in t["nodes"][h]["rails"]]) for h in hosts)
    return t, roce


def test_with_the_topology_a_pair_is_still_both_directions_of_every_rail():
    t, roce = cluster({H: ["192.168.100.1", "192.168.101.1"], W: ["192.168.100.2", "192.168.101.2"]}, "direct")
    plan = bandwidth_plan(H, [W], roce, t)
    assert sorted((m["rail"], m["client"], m["server"]) for m in plan) == [(0, H, W), (0, W, H), (1, H, W), (1, W, H)]


def test_behind_a_switch_each_rail_is_a_ring_so_every_port_sends_and_receives_once():
    addrs = dict((n, ["192.168.100.%d" % (i + 1), "192.168.101.%d" % (i + 1)]) for i, n in enumerate(["h", "a", "b", "c"]))
    t, roce = cluster(addrs, "switch")
    plan = bandwidth_plan("h", ["a", "b", "c"], roce, t)
    assert [(m["rail"], m["client"], m["server"]) for m in plan] == [
        (0, "h", "a"), (0, "a", "b"), (0, "b", "c"), (0, "c", "h"), (1, "h", "a"), (1, "a", "b"), (1, "b", "c"), (1, "c", "h")]
    for rail in (0, 1):
        ring = [m for m in plan if m["rail"] == rail]
        assert sorted(m["client"] for m in ring) == sorted(m["server"] for m in ring) == ["a", "b", "c", "h"]
    assert plan[1]["server_ipv4"] == "192.168.100.3"


def test_in_a_triangle_every_cable_is_measured_both_ways_over_its_own_rails():
    t, roce = cluster({"h": ["192.168.100.1", "192.168.102.1"], "a": ["192.168.100.2", "192.168.101.1"],
                       "b": ["192.168.102.2", "192.168.101.2"]}, "direct")
    plan = bandwidth_plan("h", ["a", "b"], roce, t)
    assert sorted((m["client"], m["rail"], m["server"], m["server_rail"], m["server_ipv4"]) for m in plan) == [
        ("a", 0, "h", 0, "192.168.100.1"), ("a", 1, "b", 1, "192.168.101.2"), ("b", 0, "h", 1, "192.168.102.1"),
        ("b", 1, "a", 1, "192.168.101.1"), ("h", 0, "a", 0, "192.168.100.2"), ("h", 1, "b", 0, "192.168.102.2")]


def test_a_link_whose_ends_differ_in_mtu_is_named_once_with_both_ends():
    t, roce = cluster({H: ["192.168.100.1", "192.168.101.1"], W: ["192.168.100.2", "192.168.101.2"]}, "direct")
    mtus = {H: {"enp1s0f1np1": 9000, "enP2p1s0f1np1": 9000}, W: {"enp1s0f1np1": 9000, "enP2p1s0f1np1": 1500}}
    plan = bandwidth_plan(H, [W], roce, t, mtus)
    assert mtu_mismatches(plan) == [
        "spark-head enP2p1s0f1np1 MTU 9000, spark-worker enP2p1s0f1np1 MTU 1500: expected the same MTU on both ends of the link"]
    mtus[W]["enP2p1s0f1np1"] = 9000
    assert mtu_mismatches(bandwidth_plan(H, [W], roce, t, mtus)) == []


def measured(plan_pairs, slow_hosts, figure=13.1):
    out = []
    for rail in (0, 1):
        for client, server in plan_pairs:
            gbps = figure if {client, server} & set(slow_hosts) else 98.0
            out.append({"rail": rail, "netdev": "enp1s0f1np1", "client": client, "server": server, "gbps": gbps})
    return out


PAIR = [(W, H), (H, W)]


def test_healthy_pair():
    verdict = bandwidth_verdict(measured(PAIR, []), 80, H, [W])
    assert verdict["action"] == "ok" and verdict["slow"] == [] and "98.00 Gb/s" in verdict["report"]


def test_the_report_names_the_queue_pairs_of_each_figure():
    """The threshold is of NVIDIA's 4-QP check: the report says what each figure was measured with."""
    results = [dict(r, qps=4) for r in measured(PAIR, [])]
    verdict = bandwidth_verdict(results, 80, H, [W])
    assert "rail 0 (enp1s0f1np1) %s -> %s 98.00 Gb/s (4 QPs)" % (W, H) in verdict["report"], verdict["report"]


def test_pair_not_allowed_names_rails_figures_and_both_ways_out():
    verdict = bandwidth_verdict(measured(PAIR, [W]), 80, H, [W], reboot_ok=False)
    assert verdict["action"] == "reboot_needed" and verdict["reboot"] == W
    for fragment in ("rail 0 (enp1s0f1np1) spark-worker -> spark-head: 13.10 Gb/s", "nic_reboot_ok=true",
                     "reboot the nodes one at a time", OPERATOR_ACTION):
        assert fragment in verdict["msg"], fragment


def test_pair_reboots_the_worker_first_then_the_head_then_operator():
    # one figure cannot tell which end: the worker goes first, even when the head is the throttled one
    first = bandwidth_verdict(measured(PAIR, [H]), 80, H, [W], rebooted=[], reboot_ok=True)
    assert (first["action"], first["reboot"]) == ("reboot", W)
    second = bandwidth_verdict(measured(PAIR, [H]), 80, H, [W], rebooted=[W], reboot_ok=True)
    assert (second["action"], second["reboot"]) == ("reboot", H)
    third = bandwidth_verdict(measured(PAIR, [H]), 80, H, [W], rebooted=[W, H], reboot_ok=True)
    assert third["action"] == "operator" and third["reboot"] is None
    assert OPERATOR_ACTION in third["msg"] and "13.10 Gb/s" in third["msg"] and "rail 1" in third["msg"]


def test_operator_even_when_reboots_are_not_allowed():
    verdict = bandwidth_verdict(measured(PAIR, [W]), 80, H, [W], rebooted=[W, H], reboot_ok=False)
    assert verdict["action"] == "operator"


def test_n_nodes_the_node_whose_every_link_is_slow_goes_first():
    three = [(W, H), (W2, H), (H, W)]
    verdict = bandwidth_verdict(measured(three, [W2]), 80, H, [W, W2], reboot_ok=True)
    assert verdict["reboot"] == W2
    head_throttled = bandwidth_verdict(measured(three, [H]), 80, H, [W, W2], reboot_ok=True)
    assert head_throttled["reboot"] == H          # two slow links, every one of them: the head itself


def test_two_throttled_nodes_are_rebooted_one_at_a_time():
    """Issue 19's claim: nic_reboot_ok with two throttled nodes reboots one at a time, each once."""
    results = measured(PAIR, [H, W])
    order = []
    for _round in range(3):
        verdict = bandwidth_verdict(results, 80, H, [W], rebooted=order, reboot_ok=True)
        if verdict["action"] != "reboot":
            break
        order.append(verdict["reboot"])
    assert order == [W, H] and verdict["action"] == "operator"


def test_a_failed_measurement_fails_and_never_reboots():
    results = measured(PAIR, [W])
    results[0].update(gbps=None, error="ib_write_bw exited 1 on device rocep1s0f1: Couldn't connect to 192.168.100.1:18515")
    verdict = bandwidth_verdict(results, 80, H, [W], reboot_ok=True)
    assert verdict["action"] == "error" and verdict["reboot"] is None
    assert "could not measure rail 0 (enp1s0f1np1) spark-worker -> spark-head: ib_write_bw exited 1" in verdict["msg"]


@pytest.mark.parametrize(("speed", "width", "problems", "warnings"), [
    ("32.0 GT/s PCIe", "4", 0, 0),
    ("32 GT/s", "4", 0, 0),
    ("32.0 GT/s PCIe", "2", 0, 1),
    ("16.0 GT/s PCIe", "4", 1, 0),
    ("32.0 GT/s PCIe", "1", 1, 0),
    (None, None, 1, 0),
])
def test_pcie_link_check(speed, width, problems, warnings):
    found, warned = pcie_link_check("enP2p1s0f1np1", "0002:01:00.1", speed, width)
    assert (len(found), len(warned)) == (problems, warnings), (found, warned)
    if warned:
        assert "early GX10 BIOS" in warned[0] and "0002:01:00.1" in warned[0]


def test_slot_power_lines_keyed_by_pci_address():
    log = ("[    5.1] mlx5_core 0002:01:00.0: mlx5_pcie_event:326:(pid 3202): "
           "Detected insufficient power on the PCIe slot (27W).\n"
           "mlx5_core 0000:01:00.1: 126.028 Gb/s available PCIe bandwidth (32.0 GT/s PCIe x4 link)\n"
           "kernel: mlx5_core 0000:01:00.1: mlx5_pcie_event:326:(pid 7): Detected insufficient power on the PCIe slot (27W).\n")
    assert slot_power_lines(log) == {"0002:01:00.0": "27W", "0000:01:00.1": "27W"}
    assert slot_power_lines("") == {}
