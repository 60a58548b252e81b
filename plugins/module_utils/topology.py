# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's topology, derived once from the inventory (issue 28).

Every role reads what :func:`cluster_topology` returns (the preflight play sets it as the fact
``preflight_topology``; the filter ``dgxspark.cluster.cluster_topology`` computes it where a role runs on its own)
instead of reading ``dgxspark_fabric_rails`` and the groups again.

Nodes and ranks: the head is the one host of the head group (rank 0); the workers are ranks 1..N-1 in the order of
the worker group. Each node lists its rails in ``dgxspark_fabric_rails`` ([{netdev, ipv4}], rail 0 first).

Two shapes (``dgxspark_fabric_shape``):

- ``direct``: point-to-point cables, one subnet (``dgxspark_fabric_prefix``) per cable, as a back-to-back pair is
  cabled and as the DSpark recipe's 3-node launcher cables a triangle (MiaAI-Lab/DSpark PR #196: each Spark's two
  QSFP cages go to the two other Sparks, one /24 per cable). A subnet holds exactly two rails of two nodes (a cable);
  every two nodes share a cable, since NCCL has no route through a third Spark: with two cages per Spark that is 2 or
  3 nodes.
- ``switch``: every node on one network per rail (2 to 8 nodes behind a switch): rail i of every node is on the
  same subnet, and every two nodes reach each other over every rail.

The rendezvous (``--master-addr``) of a node is the head's address on the first link between the head and that
node (rail 0 of the head on a switch, and for the head itself): in the direct shape the head has no one address
that every worker reaches. ``head_addr`` is the head's address on that link (where the node sends to the head: the
image transfer) and ``from_head`` the node's own address on it (where the head sends to the node: the checkpoint
sync, the head's fabric ssh check).

The TCP bootstrap (``VLLM_HOST_IP``, the socket interfaces of NCCL, Gloo and vLLM's TP group, ``--master-addr``)
runs on rail 0 (``host_ip``, ``socket_netdev``), unless the nodes name a bootstrap network,
``dgxspark_bootstrap: {netdev, ipv4}`` on every node: then on that one. Three Sparks cabled in a triangle need it:
rail 0 of a node reaches one other node only, and every rank's bootstrap address must reach every other rank. The
DSpark recipe's start-tp3.sh moves the bootstrap to the RJ45 LAN for that reason (``TP3_BOOTSTRAP_IFNAME``,
default enP7s7, "the only L3 that reaches all three ranks"); RDMA stays on the rails.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

try:
    from collections.abc import Mapping
except ImportError:  # pragma: no cover - Python 2 is not supported by the collection
    Mapping = dict  # type: ignore

RAILS_VAR = "dgxspark_fabric_rails"
BOOTSTRAP_VAR = "dgxspark_bootstrap"
SHAPES = ("direct", "switch")
MAX_NODES = 8


class TopologyError(ValueError):
    """The inventory describes no cluster the collection can serve on; the message names the host and the rail."""


def _text(value):
    try:
        return u"%s" % (value,)
    except Exception:  # pragma: no cover - defensive
        return repr(value)


def _rails(host, hvars, prefix, problems):
    """[{index, netdev, ipv4, network}] of one host, or None with the problems recorded."""
    rails = hvars.get(RAILS_VAR) if isinstance(hvars, Mapping) else None
    if not isinstance(rails, (list, tuple)) or not rails:
        problems.append("%s: %s is %s, expected a list of {netdev, ipv4} (the fabric addresses)"
                        % (host, RAILS_VAR, "not set" if rails is None else repr(rails)))
        return None
    out = []
    for idx, rail in enumerate(rails):
        if not isinstance(rail, Mapping):
            problems.append("%s: %s[%d] is %r, expected a dict with netdev and ipv4" % (host, RAILS_VAR, idx, rail))
            return None
        netdev = rail.get("netdev")
        if not isinstance(netdev, str) or not netdev.strip():
            problems.append("%s: %s[%d].netdev is %r, expected the fabric netdev name (for example enp1s0f1np1)"
                            % (host, RAILS_VAR, idx, netdev))
            return None
        try:
            addr = ipaddress.IPv4Address(_text(rail.get("ipv4")))
        except (ipaddress.AddressValueError, ValueError):
            problems.append("%s: %s[%d].ipv4 is %r, expected an IPv4 address" % (host, RAILS_VAR, idx, rail.get("ipv4")))
            return None
        net = ipaddress.IPv4Network(u"%s/%d" % (addr, prefix), strict=False)
        out.append({"index": idx, "netdev": netdev, "ipv4": _text(addr), "network": _text(net)})
    return out


def _bootstrap(host, hvars, problems):
    """{netdev, ipv4} of the node's bootstrap network, None when unset, False with the problem recorded."""
    value = hvars.get(BOOTSTRAP_VAR) if isinstance(hvars, Mapping) else None
    if value is None:
        return None
    netdev = value.get("netdev") if isinstance(value, Mapping) else None
    if not isinstance(netdev, str) or not netdev.strip() or netdev.strip() == "lo":
        problems.append("%s: %s.netdev is %r, expected the netdev of a network every node reaches (the RJ45 LAN, for "
                        "example enP7s7; never lo: Gloo would bind 127.0.0.1)"
                        % (host, BOOTSTRAP_VAR, netdev if isinstance(value, Mapping) else value))
        return False
    try:
        addr = ipaddress.IPv4Address(_text(value.get("ipv4")))
    except (ipaddress.AddressValueError, ValueError):
        problems.append("%s: %s.ipv4 is %r, expected this node's IPv4 address on %s" % (host, BOOTSTRAP_VAR, value.get("ipv4"), netdev))
        return False
    if addr.is_loopback or addr.is_unspecified:
        problems.append("%s: %s.ipv4 is %s, expected this node's address on %s that the other nodes reach"
                        % (host, BOOTSTRAP_VAR, addr, netdev))
        return False
    return {"netdev": netdev.strip(), "ipv4": _text(addr)}


def _bootstraps(hosts, hostvars, shape, rails, problems):
    """{host: {netdev, ipv4}} when every node names its bootstrap network, {} when none does."""
    found = dict((h, _bootstrap(h, hostvars[h] if h in hostvars else {}, problems)) for h in hosts)
    named = [h for h in hosts if found[h]]
    if any(v is False for v in found.values()):
        return {}
    if named and len(named) != len(hosts):
        for host in hosts:
            if not found[host]:
                problems.append("%s: %s is not set, but %s set it: expected it on every node or on none"
                                % (host, BOOTSTRAP_VAR, ", ".join(named)))
        return {}
    if not named and shape == "direct" and len(hosts) > 2:
        for host in hosts:
            problems.append("%s: %s is not set, expected {netdev, ipv4} of a network every node reaches (the RJ45 "
                            "LAN): %d nodes on direct cables, rail 0 (%s) reaches one other node only, and the TCP "
                            "bootstrap (VLLM_HOST_IP, the NCCL, Gloo and TP sockets) must reach every rank"
                            % (host, BOOTSTRAP_VAR, len(hosts), rails[host][0]["netdev"]))
        return {}
    seen = {}
    for host in named:
        addr = found[host]["ipv4"]
        if addr in seen:
            problems.append("%s: %s.ipv4 %s is %s's too, expected an address of its own" % (host, BOOTSTRAP_VAR, addr, seen[addr]))
        seen[addr] = host
        fabric = set(r["ipv4"] for r in rails[host])
        if addr in fabric:
            problems.append("%s: %s.ipv4 %s is a fabric rail's address, expected the address on the network every node "
                            "reaches (%s)" % (host, BOOTSTRAP_VAR, addr, found[host]["netdev"]))
    return dict((h, found[h]) for h in named)


def _link(a, ra, b, rb):
    return {"a": a, "a_rail": ra["index"], "a_netdev": ra["netdev"], "a_ipv4": ra["ipv4"],
            "b": b, "b_rail": rb["index"], "b_netdev": rb["netdev"], "b_ipv4": rb["ipv4"], "network": ra["network"]}


def _direct_links(hosts, rails, problems):
    by_net = {}
    for host in hosts:
        for rail in rails[host]:
            by_net.setdefault(rail["network"], []).append((host, rail))
    links = []
    for net in sorted(by_net, key=ipaddress.IPv4Network):
        ends = by_net[net]
        names = ", ".join("%s rail %d (%s)" % (h, r["index"], r["netdev"]) for h, r in ends)
        if len(ends) > 2:
            problems.append("%s: subnet %s is shared by %d rails (%s), expected one cable (two rails) per subnet in the "
                            "direct shape (dgxspark_fabric_shape: switch for nodes behind a switch)"
                            % (ends[2][0], net, len(ends), names))
        elif len(ends) == 1:
            problems.append("%s: rail %d (%s, %s) is on subnet %s, which no other node is on: expected the other end of "
                            "its cable on the same subnet" % (ends[0][0], ends[0][1]["index"], ends[0][1]["netdev"],
                                                              ends[0][1]["ipv4"], net))
        elif ends[0][0] == ends[1][0]:
            problems.append("%s: rails %d and %d are both on subnet %s, expected the two ends of a cable on two nodes"
                            % (ends[0][0], ends[0][1]["index"], ends[1][1]["index"], net))
        else:
            (a, ra), (b, rb) = sorted(ends, key=lambda e: hosts.index(e[0]))
            links.append(_link(a, ra, b, rb))
    return links


def _switch_links(hosts, rails, problems):
    counts = set(len(rails[h]) for h in hosts)
    if len(counts) > 1:
        first = hosts[0]
        for host in hosts[1:]:
            if len(rails[host]) != len(rails[first]):
                problems.append("%s: has %d rails, %s has %d: expected the same rails on every node behind a switch"
                                % (host, len(rails[host]), first, len(rails[first])))
        return []
    links = []
    for idx in range(len(rails[hosts[0]])):
        net = rails[hosts[0]][idx]["network"]
        for host in hosts[1:]:
            if rails[host][idx]["network"] != net:
                problems.append("%s: rail %d (%s) is outside %s (rail %d of %s), expected one network per rail behind "
                                "a switch" % (host, idx, rails[host][idx]["ipv4"], net, idx, hosts[0]))
        for i, a in enumerate(hosts):
            for b in hosts[i + 1:]:
                links.append(_link(a, rails[a][idx], b, rails[b][idx]))
    return links


def prefix_ok(fabric_prefix):
    """Whether dgxspark_fabric_prefix is an integer between 8 and 30."""
    return isinstance(fabric_prefix, int) and not isinstance(fabric_prefix, bool) and 8 <= fabric_prefix <= 30


def group_problems(groups, head_group="spark_head", worker_group="spark_workers", shape="direct", fabric_prefix=24):
    """(problems, heads, workers): the groups, the shape and the prefix, checked once for the inventory and the topology."""
    problems = []
    groups = groups if isinstance(groups, Mapping) else {}
    heads = list(groups.get(head_group) or [])
    workers = [h for h in (groups.get(worker_group) or []) if h not in heads]
    if len(heads) != 1:
        problems.append("inventory: group %s has %d hosts (%s), expected exactly one head"
                        % (head_group, len(heads), ", ".join(heads) or "none"))
    if not workers:
        problems.append("inventory: group %s has no hosts, expected at least one worker" % worker_group)
    for host in [h for h in (groups.get(worker_group) or []) if h in heads]:
        problems.append("%s: is in both %s and %s, expected one role per node" % (host, head_group, worker_group))
    if not prefix_ok(fabric_prefix):
        problems.append("inventory: dgxspark_fabric_prefix is %r, expected an integer between 8 and 30" % (fabric_prefix,))
    if shape not in SHAPES:
        problems.append("inventory: dgxspark_fabric_shape is %r, expected one of %s" % (shape, ", ".join(SHAPES)))
    return problems, heads, workers


def topology_problems(groups, hostvars, head_group="spark_head", worker_group="spark_workers", shape="direct",
                      fabric_prefix=24):
    """(problems, topology): every problem with the cluster's shape as a message, and the topology when there is none."""
    problems, heads, workers = group_problems(groups, head_group, worker_group, shape, fabric_prefix)
    if problems:
        return problems, None
    hosts = heads + workers
    if len(hosts) > MAX_NODES:
        problems.append("inventory: %d nodes (%s), expected 2 to %d" % (len(hosts), ", ".join(hosts), MAX_NODES))
    rails = {}
    for host in hosts:
        rails[host] = _rails(host, hostvars[host] if host in hostvars else {}, fabric_prefix, problems)
    if problems:
        return problems, None
    links = (_direct_links if shape == "direct" else _switch_links)(hosts, rails, problems)
    peers = dict((h, {}) for h in hosts)
    for link in links:
        peers[link["a"]].setdefault(link["b"], []).append(
            {"rail": link["a_rail"], "netdev": link["a_netdev"], "local": link["a_ipv4"], "remote": link["b_ipv4"],
             "peer_rail": link["b_rail"], "network": link["network"]})
        peers[link["b"]].setdefault(link["a"], []).append(
            {"rail": link["b_rail"], "netdev": link["b_netdev"], "local": link["b_ipv4"], "remote": link["a_ipv4"],
             "peer_rail": link["a_rail"], "network": link["network"]})
    for i, a in enumerate(hosts):
        for b in hosts[i + 1:]:
            if b not in peers[a]:
                via = "the head" if a == hosts[0] else a
                problems.append("%s: reaches %s over no rail (its rails: %s), expected a %s between every two nodes"
                                % (b, via, ", ".join("%d %s %s" % (r["index"], r["netdev"], r["ipv4"]) for r in rails[b]),
                                   "cable" if shape == "direct" else "network"))
    if problems:
        return problems, None
    boot = _bootstraps(hosts, hostvars, shape, rails, problems)
    if problems:
        return problems, None
    head = hosts[0]
    nodes = {}
    for rank, host in enumerate(hosts):
        # behind a switch the first link to the head is over rail 0: its rail 0 address, the same for every node
        master = rails[head][0]["ipv4"] if host == head else peers[host][head][0]["remote"]
        nodes[host] = {"rank": rank, "role": "head" if rank == 0 else "worker", "address": rails[host][0]["ipv4"],
                       "netdev": rails[host][0]["netdev"], "rails": rails[host],
                       "master_addr": boot[head]["ipv4"] if boot else master,
                       "head_addr": master,
                       "host_ip": boot[host]["ipv4"] if boot else rails[host][0]["ipv4"],
                       "socket_netdev": boot[host]["netdev"] if boot else rails[host][0]["netdev"],
                       "bootstrap": boot.get(host),
                       "from_head": rails[head][0]["ipv4"] if host == head else peers[host][head][0]["local"],
                       "peers": peers[host]}
    return [], {"shape": shape, "head": head, "hosts": hosts, "workers": hosts[1:], "nnodes": len(hosts),
                "prefix": fabric_prefix, "links": links, "nodes": nodes, "fanout_rounds": fanout_rounds(len(hosts)),
                "bootstrap": bool(boot)}


def cluster_topology(groups, hostvars, head_group="spark_head", worker_group="spark_workers", shape="direct",
                     fabric_prefix=24):
    """The topology (see the module's doc); raises TopologyError naming the host and the rail on a bad shape.

    >>> t = cluster_topology({'spark_head': ['h'], 'spark_workers': ['w']},
    ...                      {'h': {'dgxspark_fabric_rails': [{'netdev': 'a', 'ipv4': '192.168.100.1'}]},
    ...                       'w': {'dgxspark_fabric_rails': [{'netdev': 'a', 'ipv4': '192.168.100.2'}]}})
    >>> t['nodes']['w']['rank'], t['nodes']['w']['master_addr'], t['nodes']['w']['head_addr'], t['nodes']['w']['from_head']
    (1, '192.168.100.1', '192.168.100.1', '192.168.100.2')
    """
    problems, topo = topology_problems(groups, hostvars, head_group, worker_group, shape, fabric_prefix)
    if problems:
        raise TopologyError(" | ".join(problems))
    return topo


def fanout_round(topo, holders, targets, refused=None, fanout=True):
    """One round of the checkpoint fan-out: ``{target: {source, source_addr, dest_addr}}``.

    ``holders``: the nodes that hold a verified copy (the head always does); ``targets``: the nodes that do not yet.
    ``refused``: ``{target: [source, ...]}``, the sources a target's sync failed from in earlier rounds.

    Each holder sends to at most one target per round (its disk and its link carry one copy at a time, so every copy
    runs at the link's full rate), so the holders double each round: head -> w1, then w1 -> w2 and head -> w3. With
    N-1 workers that is ceil(log2 N) rounds instead of N-1 copies out of the head (2 instead of 3 for four nodes).
    Holders are taken workers first in rank order, the head last (it carries the download and serves the API; in the
    first round it is the only holder), targets in rank order; a holder serves a target only over a link
    they share (always behind a switch; in the direct shape, a cable). A target whose sync failed is retried only from a
    holder it did not fail from (a pair has none: its failed sync stops the run, as a timeout always did); a sync that
    ran but left a copy to repair is not a failure, and its holder may send again.
    ``fanout=False`` is the head alone sending to every target at once (what a pair does; the benchmark's baseline).
    The addresses are the two ends of the first link between them: ``dest_addr`` is where the source sends,
    ``source_addr`` is what the target allows in (rsync daemon ``hosts allow``, authorized key ``from=``).

    >>> topo = {'hosts': ['h', 'a', 'b', 'c'], 'nodes': dict((n, {'peers': dict((p, [{'local': n, 'remote': p}])
    ...         for p in 'habc' if p != n)}) for n in 'habc')}
    >>> sorted((t, p['source']) for t, p in fanout_round(topo, ['h'], ['a', 'b', 'c']).items())
    [('a', 'h')]
    >>> sorted((t, p['source']) for t, p in fanout_round(topo, ['h', 'a'], ['b', 'c']).items())
    [('b', 'a'), ('c', 'h')]
    >>> sorted((t, p['source']) for t, p in fanout_round(topo, ['h', 'a', 'b'], ['c'], {'c': ['a']}).items())
    [('c', 'b')]
    >>> fanout_round(topo, ['h'], ['a'], {'a': ['h']})
    {}
    """
    refused = refused if isinstance(refused, Mapping) else {}
    order = list(topo["hosts"])
    rank = dict((h, i) for i, h in enumerate(order))
    holders = sorted(set(h for h in holders if h in rank), key=lambda h: (h == order[0], rank[h]))
    if not fanout:
        holders = [h for h in holders if h == order[0]]
    targets = sorted(set(t for t in targets if t in rank and t not in holders), key=rank.get)
    busy = set()
    plan = {}
    for target in targets:
        failed = set(refused.get(target) or [])
        reach = [h for h in holders if h not in busy and h in topo["nodes"][target]["peers"] and h not in failed]
        pick = (reach or [None])[0]
        if pick is None:
            continue
        if fanout:
            busy.add(pick)
        link = topo["nodes"][pick]["peers"][target][0]
        plan[target] = {"source": pick, "source_addr": link["local"], "dest_addr": link["remote"]}
    return plan


def fanout_rounds(nnodes, retries=1):
    """The most rounds a fan-out of ``nnodes`` nodes takes: ceil(log2 nnodes), plus ``retries`` for failed syncs.

    >>> fanout_rounds(2), fanout_rounds(4), fanout_rounds(5), fanout_rounds(8, 0)
    (2, 3, 4, 3)
    """
    rounds = 0
    while (1 << rounds) < nnodes:
        rounds += 1
    return rounds + retries
