# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/topology.py: the cluster's topology, derived once (issue 28)."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import topology as topo

RAIL0, RAIL1 = "enp1s0f1np1", "enP2p1s0f1np1"


def rails(*addrs):
    return {"dgxspark_fabric_rails": [{"netdev": (RAIL0, RAIL1)[i], "ipv4": a} for i, a in enumerate(addrs)]}


def groups(n):
    return {"spark_head": ["n0"], "spark_workers": ["n%d" % i for i in range(1, n)]}


def pair():
    """The sim's pair: two cables, one subnet each."""
    return groups(2), {"n0": rails("192.168.100.1", "192.168.105.1"), "n1": rails("192.168.100.2", "192.168.105.2")}


def triangle(bootstrap=True):
    """The DSpark recipe's 3-node cabling: every Spark's two cages go to the two others, one /24 per cable; the TCP
    bootstrap on the RJ45 LAN (start-tp3.sh: TP3_BOOTSTRAP_IFNAME, enP7s7, 192.168.1.0/24)."""
    hostvars = {"n0": rails("192.168.100.1", "192.168.102.1"),
                "n1": rails("192.168.100.2", "192.168.101.1"),
                "n2": rails("192.168.102.2", "192.168.101.2")}
    if bootstrap:
        for i, host in enumerate(sorted(hostvars)):
            hostvars[host]["dgxspark_bootstrap"] = {"netdev": "enP7s7", "ipv4": "192.168.1.%d" % (11 + i)}
    return groups(3), hostvars


def switch(n):
    return groups(n), dict(("n%d" % i, rails("192.168.100.%d" % (i + 1), "192.168.105.%d" % (i + 1))) for i in range(n))


def test_a_pair_is_two_links_and_every_node_knows_its_rank_master_and_peer():
    t = topo.cluster_topology(*pair())
    assert t["shape"] == "direct" and t["hosts"] == ["n0", "n1"] and t["nnodes"] == 2 and t["workers"] == ["n1"]
    assert [(lk["a"], lk["a_rail"], lk["b"], lk["b_rail"], lk["network"]) for lk in t["links"]] == [
        ("n0", 0, "n1", 0, "192.168.100.0/24"), ("n0", 1, "n1", 1, "192.168.105.0/24")]
    worker = t["nodes"]["n1"]
    assert (worker["rank"], worker["role"], worker["master_addr"], worker["from_head"], worker["address"]) == (
        1, "worker", "192.168.100.1", "192.168.100.2", "192.168.100.2")
    assert [p["remote"] for p in worker["peers"]["n0"]] == ["192.168.100.1", "192.168.105.1"]
    assert t["nodes"]["n0"]["master_addr"] == "192.168.100.1" and t["nodes"]["n0"]["role"] == "head"


def test_the_same_pair_behind_a_switch_derives_the_same_links():
    direct = topo.cluster_topology(*pair())
    behind = topo.cluster_topology(*pair(), shape="switch")
    assert behind["links"] == direct["links"]
    assert behind["nodes"]["n1"]["master_addr"] == direct["nodes"]["n1"]["master_addr"]


def test_a_triangle_reaches_the_head_over_a_different_cable_from_each_worker():
    t = topo.cluster_topology(*triangle())
    assert len(t["links"]) == 3
    assert t["nodes"]["n1"]["from_head"] == "192.168.100.2" and t["nodes"]["n1"]["peers"]["n0"][0]["remote"] == "192.168.100.1"
    assert t["nodes"]["n2"]["from_head"] == "192.168.102.2" and t["nodes"]["n2"]["peers"]["n0"][0]["remote"] == "192.168.102.1"
    # the workers' own cable, rail 1 of n1 to rail 1 of n2
    expected = [{"rail": 1, "netdev": RAIL1, "local": "192.168.101.1", "remote": "192.168.101.2",
                 "peer_rail": 1, "network": "192.168.101.0/24"}]
    assert t["nodes"]["n1"]["peers"]["n2"] == expected


def test_a_triangle_bootstraps_on_the_lan_every_node_reaches_and_a_pair_on_rail_0():
    t = topo.cluster_topology(*triangle())
    assert t["bootstrap"] is True
    for i, host in enumerate(["n0", "n1", "n2"]):
        node = t["nodes"][host]
        # every rank meets the head at its LAN address, advertises its own, and binds its sockets there
        assert (node["master_addr"], node["host_ip"], node["socket_netdev"]) == (
            "192.168.1.11", "192.168.1.%d" % (11 + i), "enP7s7")
        assert node["bootstrap"] == {"netdev": "enP7s7", "ipv4": "192.168.1.%d" % (11 + i)}
    # the checkpoint and the image still go over the cable between the head and each worker, in both directions
    assert (t["nodes"]["n2"]["from_head"], t["nodes"]["n2"]["head_addr"]) == ("192.168.102.2", "192.168.102.1")
    assert (t["nodes"]["n1"]["from_head"], t["nodes"]["n1"]["head_addr"]) == ("192.168.100.2", "192.168.100.1")
    p = topo.cluster_topology(*pair())
    assert p["bootstrap"] is False and p["nodes"]["n1"]["bootstrap"] is None
    assert (p["nodes"]["n1"]["host_ip"], p["nodes"]["n1"]["socket_netdev"]) == ("192.168.100.2", RAIL0)


def test_a_triangle_without_a_bootstrap_network_names_every_host_and_the_variable():
    problems, t = topo.topology_problems(*triangle(bootstrap=False))
    assert t is None and len(problems) == 3
    assert all("dgxspark_bootstrap is not set" in p and "reaches one other node only" in p for p in problems), problems
    assert [p.split(":")[0] for p in problems] == ["n0", "n1", "n2"]


@pytest.mark.parametrize("change, words", [
    (lambda hv: hv["n2"].pop("dgxspark_bootstrap"), "n2: dgxspark_bootstrap is not set, but n0, n1 set it"),
    (lambda hv: hv["n1"].update(dgxspark_bootstrap={"netdev": "lo", "ipv4": "10.0.0.2"}), "n1: dgxspark_bootstrap.netdev is 'lo'"),
    (lambda hv: hv["n1"].update(dgxspark_bootstrap={"netdev": "enP7s7", "ipv4": "127.0.0.1"}), "n1: dgxspark_bootstrap.ipv4 is 127.0.0.1"),
    (lambda hv: hv["n1"].update(dgxspark_bootstrap={"netdev": "enP7s7", "ipv4": "nope"}), "n1: dgxspark_bootstrap.ipv4 is 'nope'"),
    (lambda hv: hv["n1"].update(dgxspark_bootstrap="enP7s7"), "n1: dgxspark_bootstrap.netdev is 'enP7s7'"),
    (lambda hv: hv["n2"]["dgxspark_bootstrap"].update(ipv4="192.168.1.11"), "n2: dgxspark_bootstrap.ipv4 192.168.1.11 is n0's too"),
    (lambda hv: hv["n2"]["dgxspark_bootstrap"].update(ipv4="192.168.102.2"), "n2: dgxspark_bootstrap.ipv4 192.168.102.2 is a fabric"),
])
def test_a_bad_bootstrap_network_is_named(change, words):
    grp, hostvars = triangle()
    change(hostvars)
    problems, t = topo.topology_problems(grp, hostvars)
    assert t is None and any(words in p for p in problems), problems


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_a_switch_of_n_nodes_links_every_two_nodes_over_every_rail(n):
    t = topo.cluster_topology(*switch(n), shape="switch")
    assert t["hosts"] == ["n%d" % i for i in range(n)]
    assert len(t["links"]) == 2 * n * (n - 1) // 2
    assert set(t["nodes"]["n%d" % (n - 1)]["peers"]) == set("n%d" % i for i in range(n - 1))
    assert all(node["master_addr"] == "192.168.100.1" for node in t["nodes"].values())
    assert [t["nodes"][h]["rank"] for h in t["hosts"]] == list(range(n))


def test_a_switch_cluster_in_the_direct_shape_names_the_shared_subnet_and_the_variable():
    problems, t = topo.topology_problems(*switch(4))
    assert t is None
    assert any("subnet 192.168.100.0/24 is shared by 4 rails" in p and "dgxspark_fabric_shape: switch" in p for p in problems), problems


def test_a_four_node_ring_without_a_switch_names_the_node_that_reaches_the_head_over_no_rail():
    g = groups(4)
    hv = {"n0": rails("192.168.100.1", "192.168.103.2"), "n1": rails("192.168.100.2", "192.168.101.1"),
          "n2": rails("192.168.101.2", "192.168.102.1"), "n3": rails("192.168.102.2", "192.168.103.1")}
    problems = topo.topology_problems(g, hv)[0]
    assert "n2: reaches the head over no rail" in " | ".join(problems), problems


def test_a_cable_with_one_end_names_the_host_and_the_rail():
    g, hv = pair()
    hv["n1"] = rails("192.168.100.2", "192.168.106.2")
    problems = topo.topology_problems(g, hv)[0]
    assert any(p.startswith("n0: rail 1 (%s, 192.168.105.1) is on subnet 192.168.105.0/24, which no other node is on" % RAIL1)
               for p in problems), problems
    assert any(p.startswith("n1: rail 1 (%s, 192.168.106.2)" % RAIL1) for p in problems), problems


def test_a_switch_rail_outside_its_network_names_the_host_and_the_rail():
    g, hv = switch(3)
    hv["n2"] = rails("192.168.100.3", "192.168.111.3")
    with pytest.raises(topo.TopologyError, match=r"n2: rail 1 \(192.168.111.3\) is outside 192.168.105.0/24"):
        topo.cluster_topology(g, hv, shape="switch")


def test_two_rails_of_one_node_on_one_subnet_is_no_cable():
    g, hv = pair()
    hv["n0"] = rails("192.168.100.1", "192.168.100.3")
    problems = topo.topology_problems(g, hv)[0]
    assert any("subnet 192.168.100.0/24 is shared by 3 rails" in p for p in problems), problems


@pytest.mark.parametrize("change, words", [
    (lambda g, hv: g.update(spark_head=[]), "group spark_head has 0 hosts"),
    (lambda g, hv: g.update(spark_workers=[]), "group spark_workers has no hosts"),
    (lambda g, hv: hv["n1"].pop("dgxspark_fabric_rails"), "n1: dgxspark_fabric_rails is not set"),
    (lambda g, hv: hv["n1"].update(dgxspark_fabric_rails=[{"netdev": RAIL0, "ipv4": "192.168.100.300"}]),
     "n1: dgxspark_fabric_rails[0].ipv4 is '192.168.100.300'"),
    (lambda g, hv: hv["n1"].update(dgxspark_fabric_rails=[{"ipv4": "192.168.100.2"}]),
     "n1: dgxspark_fabric_rails[0].netdev is None, expected the fabric netdev name"),
])
def test_bad_groups_and_rails_are_named(change, words):
    g, hv = pair()
    change(g, hv)
    problems, t = topo.topology_problems(g, hv)
    assert t is None and any(words in p for p in problems), problems


def test_a_bad_shape_or_prefix_or_too_many_nodes_is_named():
    assert "dgxspark_fabric_shape is 'ring'" in topo.topology_problems(*pair(), shape="ring")[0][0]
    assert "dgxspark_fabric_prefix is '24'" in topo.topology_problems(*pair(), fabric_prefix="24")[0][0]
    problems = topo.topology_problems(*switch(9), shape="switch")[0]
    assert problems == ["inventory: 9 nodes (n0, n1, n2, n3, n4, n5, n6, n7, n8), expected 2 to 8"]


def simulate_fanout(t, holders, refuse_pairs=()):
    """Run the rounds as the checkpoint role does: a pair in refuse_pairs fails once; returns the rounds' plans."""
    holders = list(holders)
    refused = {}
    rounds = []
    failed_once = set()
    while len(rounds) < topo.fanout_rounds(t["nnodes"]):
        targets = [h for h in t["hosts"] if h not in holders]
        plan = topo.fanout_round(t, holders, targets, refused)
        if not plan:
            break
        rounds.append(dict((k, v["source"]) for k, v in plan.items()))
        for target, step in plan.items():
            if (step["source"], target) in refuse_pairs and (step["source"], target) not in failed_once:
                failed_once.add((step["source"], target))
                refused.setdefault(target, []).append(step["source"])
            else:
                holders.append(target)
    return rounds, holders


def test_fanout_doubles_the_holders_every_round_behind_a_switch():
    """Four nodes: the head serves one worker, then that worker and the head serve the other two (2 rounds, not 3)."""
    t = topo.cluster_topology(*switch(4), shape="switch")
    rounds, holders = simulate_fanout(t, ["n0"])
    assert rounds == [{"n1": "n0"}, {"n2": "n1", "n3": "n0"}]
    assert sorted(holders) == ["n0", "n1", "n2", "n3"]
    step = topo.fanout_round(t, ["n0", "n1"], ["n2", "n3"])["n2"]
    assert step == {"source": "n1", "source_addr": "192.168.100.2", "dest_addr": "192.168.100.3"}


def test_fanout_of_eight_nodes_takes_three_rounds_and_no_holder_serves_two_at_once():
    t = topo.cluster_topology(*switch(8), shape="switch")
    rounds, holders = simulate_fanout(t, ["n0"])
    assert len(rounds) == 3 and len(holders) == 8
    for plan in rounds:
        assert len(set(plan.values())) == len(plan)  # one target per holder per round


def test_fanout_a_failed_sync_is_retried_from_another_holder():
    t = topo.cluster_topology(*switch(4), shape="switch")
    rounds, holders = simulate_fanout(t, ["n0"], refuse_pairs={("n0", "n3")})
    assert rounds[1] == {"n2": "n1", "n3": "n0"}
    assert rounds[2]["n3"] not in ("n0",) and sorted(holders) == ["n0", "n1", "n2", "n3"]


def test_fanout_never_retries_from_the_holder_a_sync_failed_from():
    """A pair has one holder: its failed sync (a timeout) stops the run, as before the fan-out."""
    t = topo.cluster_topology(*pair())
    assert topo.fanout_round(t, ["n0"], ["n1"], {"n1": ["n0"]}) == {}


def test_fanout_in_a_triangle_sends_over_the_cable_between_the_two():
    t = topo.cluster_topology(*triangle())
    first = topo.fanout_round(t, ["n0"], ["n1", "n2"])
    assert first == {"n1": {"source": "n0", "source_addr": "192.168.100.1", "dest_addr": "192.168.100.2"}}
    second = topo.fanout_round(t, ["n0", "n1"], ["n2"])
    assert second == {"n2": {"source": "n1", "source_addr": "192.168.101.1", "dest_addr": "192.168.101.2"}}
    retried = topo.fanout_round(t, ["n0", "n1"], ["n2"], {"n2": ["n1"]})
    assert retried["n2"]["source"] == "n0" and retried["n2"]["dest_addr"] == "192.168.102.2"


def test_fanout_nothing_to_do_and_a_pair_takes_at_most_two_rounds():
    t = topo.cluster_topology(*pair())
    assert topo.fanout_round(t, ["n0", "n1"], []) == {}
    assert topo.fanout_rounds(2) == 2 and topo.fanout_rounds(3) == 3 and topo.fanout_rounds(4) == 3


def test_without_fanout_the_head_sends_to_every_worker_at_once():
    t = topo.cluster_topology(*switch(4), shape="switch")
    plan = topo.fanout_round(t, ["n0", "n1"], ["n2", "n3"], fanout=False)
    assert dict((k, v["source"]) for k, v in plan.items()) == {"n2": "n0", "n3": "n0"}


def test_the_topology_carries_the_fanout_rounds_the_checkpoint_role_loops_over():
    assert topo.cluster_topology(*pair())["fanout_rounds"] == 2
    assert topo.cluster_topology(*switch(4), shape="switch")["fanout_rounds"] == 3
    assert topo.cluster_topology(*switch(8), shape="switch")["fanout_rounds"] == 4
