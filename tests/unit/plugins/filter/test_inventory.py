# -*- coding: utf-8 -*-
"""inventory_problems: one case per bad inventory, each asserting the message
names the host and the variable, what was found and what was expected."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dgxspark.cluster.plugins.filter.inventory import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.inventory import inventory_problems, roles_spec_problems, spec_problems, unknown_variables

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
    assert FilterModule().filters()["inventory_problems"].deferred == ("inventory", "inventory_problems")


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
     ["h: rail 0 (enp1s0f1np1, 192.168.100.1) is on subnet 192.168.100.0/24, which no other node is on",
      "w: reaches the head over no rail (its rails: 0 enp1s0f1np1 192.168.101.2), expected a cable between every two nodes"]),
    ("three-on-one-subnet-direct", {"spark_head": ["h"], "spark_workers": ["w", "v"]},
     {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.2"}]},
      "v": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.3"}]}},
     ["subnet 192.168.100.0/24 is shared by 3 rails", "dgxspark_fabric_shape: switch"]),
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


def test_behind_a_switch_a_rail_outside_its_network_is_named():
    hv = {"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.101.2"}]}}
    assert check(hostvars=hv, fabric_shape="switch") == [
        "w: rail 0 (192.168.101.2) is outside 192.168.100.0/24 (rail 0 of h), expected one network per rail behind a switch"]
    assert check(fabric_shape="ring") == ["inventory: dgxspark_fabric_shape is 'ring', expected one of direct, switch"]


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


# --- issue 13: paths, characters, ranges, secrets, unknown variables -------------------------------------------

import glob  # noqa: E402
import os  # noqa: E402

import yaml  # noqa: E402

from ansible_collections.dgxspark.cluster.plugins.module_utils.inventory import path_problem  # noqa: E402

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles")


def _spec(role):
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["argument_specs"]["main"]["options"]


def _declared():
    names = []
    for path in glob.glob(os.path.join(ROLES, "*", "meta", "argument_specs.yml")):
        with open(path, encoding="utf-8") as handle:
            names += list(yaml.safe_load(handle)["argument_specs"]["main"]["options"])
    return names


@pytest.mark.parametrize("value,phrase", [
    ("/", "the root directory"),
    ("/etc", "a top-level system directory"),
    ("/usr", "a top-level system directory"),
    ("/lib64", "a top-level system directory"),
    ("/home", "a top-level system directory"),
    ("/tmp", "a top-level system directory"),
    ("var/lib/hub", "not absolute"),
    ("/srv/../etc", "not normalised"),
    ("/srv//hub", "not normalised"),
    ("/srv/hub/", "not normalised"),
    ("/srv/./hub", "not normalised"),
    ("/srv/hub\nfake = yes", "characters outside the safe set"),
    ("/srv/my hub", "characters outside the safe set"),
    ("/srv/'hub", "characters outside the safe set"),
    ("", "empty"),
])
def test_path_problem_names_what_is_wrong(value, phrase):
    assert phrase in path_problem(value)


@pytest.mark.parametrize("value", ["/srv/hub", "/var/lib/dgxspark/huggingface/hub", "/home/nvidia/.cache/huggingface/hub",
                                   "/etc/dgxspark/vllm.env", "/run/dgxspark/nccl.env", "/library"])
def test_path_problem_accepts_good_paths(value):
    assert path_problem(value) is None


def test_the_cache_dir_root_is_refused_naming_the_variable():
    problems = spec_problems("h", "checkpoint", _spec("checkpoint"), {"checkpoint_cache_dir": "/"})
    assert len(problems) == 1 and problems[0].startswith("h: checkpoint_cache_dir is '/': the root directory; expected")


@pytest.mark.parametrize("role,name,value,words", [
    ("checkpoint", "checkpoint_sync_streams", 0, "checkpoint_sync_streams is 0, expected between 1 and 64"),
    ("checkpoint", "checkpoint_daemon_port", 70000, "checkpoint_daemon_port is 70000, expected between 1 and 65535"),
    ("service", "service_start_limit_burst", 0, "service_start_limit_burst is 0, expected at least 1"),
    ("runtime", "runtime_vllm_max_model_len", 2000000, "runtime_vllm_max_model_len is 2000000, expected between 1 and 1048576"),
    ("nic", "nic_mtu", 100000, "nic_mtu is 100000, expected between 1280 and 9216"),
    ("preflight", "preflight_fabric_ssh_port", 0, "preflight_fabric_ssh_port is 0, expected between 1 and 65535"),
])
def test_counts_and_sizes_have_their_range(role, name, value, words):
    problems = spec_problems("h", role, _spec(role), {name: value})
    assert len(problems) == 1 and words in problems[0], problems


def test_every_count_and_size_in_the_specs_has_a_range():
    missing = []
    for path in glob.glob(os.path.join(ROLES, "*", "meta", "argument_specs.yml")):
        with open(path, encoding="utf-8") as handle:
            options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
        for name, spec in options.items():
            desc = spec.get("description")
            desc = [desc] if isinstance(desc, str) else desc or []
            if spec.get("type") in ("int", "float") and not any(str(d).startswith("Range: ") for d in desc):
                missing.append(name)
    assert missing == []


@pytest.mark.parametrize("role,name,value,words", [
    ("runtime", "runtime_vllm_served_model_name", "x\nVLLM_API_KEY=", "line break"),
    ("runtime", "runtime_vllm_served_model_name", "a'b", "characters outside"),
    ("checkpoint", "checkpoint_user", "ckpt;rm", "characters outside"),
    ("service", "service_unit_name", "dgxspark-vllm", "a systemd unit name"),
    ("runtime", "runtime_compose_project", "My Project", "characters outside"),
    ("runtime", "runtime_vllm_model", "../etc/passwd", "a hub repo id"),
    ("checkpoint", "checkpoint_repo_id", "deepseek-ai/x y", "a hub repo id"),
    ("clock_cap", "clock_cap_before_units", ["ok.service", "bad\nunit.service"], "line break"),
])
def test_values_that_reach_scripts_and_units_have_a_safe_character_set(role, name, value, words):
    problems = spec_problems("h", role, _spec(role), {name: value})
    assert len(problems) == 1 and name in problems[0] and words in problems[0], problems


def test_a_netdev_with_a_newline_is_refused():
    problems = check(hostvars={"h": HEAD, "w": {"dgxspark_fabric_rails": [{"netdev": "enp1\nx", "ipv4": "192.168.100.2"}]}})
    assert problems == ["w: dgxspark_fabric_rails[0].netdev is 'enp1\\nx', expected a netdev name (at most 15 letters, digits, _ . -)"]


@pytest.mark.parametrize("name,value", [
    ("runtime_vllm_api_key", 12345678),
    ("runtime_vllm_api_key", "sec'ret\nX=1"),
    ("checkpoint_hf_token", ["hf_secret_token_value"]),
])
def test_a_secret_never_shows_in_a_message(name, value):
    role = name.split("_")[0]
    problems = spec_problems("h", role, _spec(role), {name: value})
    assert len(problems) == 1 and name in problems[0] and "****" in problems[0], problems
    assert "12345678" not in problems[0] and "sec'ret" not in problems[0] and "hf_secret" not in problems[0]


@pytest.mark.parametrize("typo,meant", [
    ("runtime_vllm_max_num_seq", "runtime_vllm_max_num_seqs"),
    ("nic_rebot_ok", "nic_reboot_ok"),
    ("checkpoint_sync_stream", "checkpoint_sync_streams"),
    ("dgxspark_fabric_rail", "dgxspark_fabric_rails"),
])
def test_a_misspelt_variable_names_the_closest_declared_one(typo, meant):
    problems = unknown_variables("h", [typo, "ansible_host", "spark_sim_name"], _declared())
    assert problems == ["h: %s is set (inventory or -e) but no role declares it: did you mean %s?" % (typo, meant)]


def test_declared_and_foreign_variables_pass():
    assert unknown_variables("h", _declared() + ["ansible_host", "spark_sim_name", "niche"], _declared()) == []


def test_unknown_variables_is_a_filter():
    assert FilterModule().filters()["unknown_variables"].deferred == ("inventory", "unknown_variables")


def test_the_preflight_knows_every_role_of_the_collection():
    """A role missing from __preflight_all_roles has its variables neither type-checked (metrics was) nor known:
    every name with its prefix would pass unnoticed, a typo included."""
    with open(os.path.join(ROLES, "preflight", "vars", "main.yml"), encoding="utf-8") as handle:
        listed = yaml.safe_load(handle)["__preflight_all_roles"]
    roles = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                   for p in glob.glob(os.path.join(ROLES, "*", "meta", "argument_specs.yml")))
    assert sorted(listed) == roles


def test_roles_spec_problems_checks_each_role_over_its_own_prefix_in_order():
    specs = {"nic": {"nic_mtu": {"type": "int"}}, "driver": {"driver_version": {"type": "str"}},
             "upgrade": {"driver_version": {"type": "int"}}}  # another role's variable in a spec: checked under its own
    values = {"nic_mtu": "9000", "driver_version": 580, "other_x": 1}
    found = roles_spec_problems("h", specs, ["driver", "nic", "upgrade"], values)
    assert found == spec_problems("h", "driver", specs["driver"], {"driver_version": 580}) \
        + spec_problems("h", "nic", specs["nic"], {"nic_mtu": "9000"})
    assert len(found) == 2 and "role driver" in found[0] and "role nic" in found[1], found
    assert FilterModule().filters()["roles_spec_problems"].deferred == ("inventory", "roles_spec_problems")
