# -*- coding: utf-8 -*-
"""inventory_problems: one case per bad inventory, each asserting the message
names the host and the variable, what was found and what was expected."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dgxspark.cluster.plugins.filter.inventory import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.inventory import inventory_problems, spec_problems

HEAD = {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"}]}
WORKER = {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.2"}]}


def check(groups=None, hostvars=None, **kw):
    groups = groups if groups is not None else {"spark_head": ["h"], "spark_workers": ["w"]}
    hostvars = hostvars if hostvars is not None else {"h": HEAD, "w": WORKER}
    hosts = [h for g in groups.values() for h in g]
    return inventory_problems(groups, hostvars, hosts, **kw)


def test_the_seed_pair_is_sane():
    assert check() == []


def test_filter_is_registered():
    assert FilterModule().filters()["inventory_problems"] is inventory_problems


CASES = [
    ("two-heads", {"spark_head": ["h", "w"], "spark_workers": []}, None,
     ["group spark_head has 2 hosts (h, w), expected exactly one head", "group spark_workers has no hosts"]),
    ("no-head", {"spark_head": [], "spark_workers": ["w"]}, {"w": WORKER},
     ["group spark_head has 0 hosts (none), expected exactly one head"]),
    ("no-worker", {"spark_head": ["h"], "spark_workers": []}, {"h": HEAD},
     ["group spark_workers has no hosts, expected at least one worker"]),
    ("missing-rails", None, {"h": HEAD, "w": {}},
     ["w: dgxspark_fabric_rails is not set, expected a list of {netdev, ipv4}"]),
    ("rails-a-string", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": "192.168.100.2"}},
     ["w: dgxspark_fabric_rails is '192.168.100.2' (string), expected a list of {netdev, ipv4}"]),
    ("rails-empty", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": []}},
     ["w: dgxspark_fabric_rails is empty"]),
    ("rail-not-a-dict", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": ["192.168.100.2"]}},
     ["w: dgxspark_fabric_rails[0] is '192.168.100.2', expected a dict with netdev and ipv4"]),
    ("bad-address", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.300"}]}},
     ["w: dgxspark_fabric_rails[0].ipv4 is '192.168.100.300', expected an IPv4 address"]),
    ("missing-netdev", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"ipv4": "192.168.100.2"}]}},
     ["w: dgxspark_fabric_rails[0].netdev is None, expected the fabric netdev name"]),
    ("duplicate-address", None, {"h": HEAD, "w": HEAD},
     ["w: dgxspark_fabric_rails[0].ipv4 192.168.100.1 is also h's address, expected unique fabric addresses"]),
    ("two-subnets", None, {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.101.2"}]}},
     ["w: dgxspark_fabric_rails[0].ipv4 192.168.101.2 is outside 192.168.100.0/24 (rail 0 of h), expected one subnet per rail"]),
]


@pytest.mark.parametrize("groups,hostvars,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_inventory_is_named(groups, hostvars, expected):
    problems = check(groups, hostvars)
    for fragment in expected:
        assert any(fragment in p for p in problems), (fragment, problems)


@pytest.mark.parametrize("prefix", ["24", True, 4, 31])
def test_bad_fabric_prefix(prefix):
    problems = check(fabric_prefix=prefix)
    assert any("dgxspark_fabric_prefix is %r, expected an integer between 8 and 30" % (prefix,) in p for p in problems)


def test_host_in_both_groups():
    problems = check({"spark_head": ["h"], "spark_workers": ["h", "w"]})
    assert "h: is in both spark_head and spark_workers, expected one role per node" in problems


def test_hosts_outside_the_play_are_not_checked():
    assert inventory_problems({"spark_head": ["h"], "spark_workers": ["w"]}, {"h": HEAD, "w": {}}, ["h"]) == []


def test_a_wider_prefix_joins_two_subnets():
    hv = {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.101.2"}]}}
    assert check(hostvars=hv, fabric_prefix=16) == []


NIC_SPEC = {
    "nic_reboot_ok": {"type": "bool", "default": False},
    "nic_mtu": {"type": "int", "default": 9000},
    "nic_bandwidth_healthy_gbps": {"type": "float"},
    "nic_roce_version": {"type": "str", "choices": ["v1", "v2"]},
    "nic_packages": {"type": "list", "elements": "str"},
    "nic_nccl_static_env": {"type": "dict"},
}

SPEC_CASES = [
    ("quoted-bool", {"nic_reboot_ok": "yes"}, "h: nic_reboot_ok is 'yes' (string), expected a boolean (true or false, unquoted) "
     "(role nic; on the command line pass JSON: -e '{\"nic_reboot_ok\": ...}')"),
    ("quoted-int", {"nic_mtu": "9000"}, "h: nic_mtu is '9000' (string), expected an integer "
     "(role nic; on the command line pass JSON: -e '{\"nic_mtu\": ...}')"),
    ("bool-for-int", {"nic_mtu": True}, "h: nic_mtu is True (boolean), expected an integer (role nic)"),
    ("bad-choice", {"nic_roce_version": "v3"}, "h: nic_roce_version is 'v3', expected one of v1, v2 (role nic)"),
    ("list-element", {"nic_packages": ["perftest", 7]}, "h: nic_packages[1] is 7 (integer), expected a string (role nic)"),
    ("dict-for-list", {"nic_packages": {"a": 1}}, "h: nic_packages is {'a': 1} (dict), expected a list (role nic)"),
]


@pytest.mark.parametrize("values,message", [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_spec_problems_name_the_variable(values, message):
    assert spec_problems("h", "nic", NIC_SPEC, values) == [message]


def test_spec_problems_accept_good_values_and_ignore_unknown_names():
    good = {"nic_reboot_ok": False, "nic_mtu": 9000, "nic_bandwidth_healthy_gbps": 80, "nic_roce_version": "v2",
            "nic_packages": [], "nic_nccl_static_env": {"NCCL_NET": "IB"}, "nic_reboot_required": "whatever"}
    assert spec_problems("h", "nic", NIC_SPEC, good) == []
