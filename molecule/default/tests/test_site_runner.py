"""site.yml driven through ansible-runner against the converged default pair.

- A run of site.yml on the converged pair has no changed task on any host
  (asserted from the event stream, naming the offenders).
- Bad inventory input: one case per row, each must fail before anything
  changes, with a message that names the variable; afterwards nothing on the
  nodes is newer than a stamp taken before the bad runs.

These tests do not use testinfra's ``host`` fixture: they run once, from the
controller, while molecule's verify step has the sim up.
"""

import copy
import os
import shutil
import subprocess

import ansible_runner
import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
SIM_DIR = os.environ.get("SPARK_SIM_DIR") or os.path.join(PROJECT, ".sim", "molecule-default")
NODE_PATHS = "/etc /usr/local /var/lib/dgxspark /opt"


def _envvars():
    return {
        "ANSIBLE_CONFIG": os.path.join(PROJECT, "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(PROJECT, "collections"),
        "SPARK_SIM_DIR": SIM_DIR,
        "ANSIBLE_NOCOLOR": "1",
    }


def _copy_inventory(dest):
    """The scenario inventory, symlinks resolved, so a case can edit any file."""
    shutil.copytree(os.path.join(SCENARIO, "inventory"), dest, symlinks=False)
    return dest


def _run_site(tmp_path, inventory, extravars=None, tags=None):
    kwargs = {}
    (tmp_path / "runner").mkdir(parents=True, exist_ok=True)
    if tags:
        kwargs["tags"] = tags
    return ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=os.path.join(PROJECT, "site.yml"),
        inventory=str(inventory),
        envvars=_envvars(),
        extravars=extravars or {},
        quiet=True,
        timeout=1800,
        **kwargs
    )


def _changed_tasks(runner):
    return ["%s: %s" % (ev["event_data"].get("host"), ev["event_data"].get("task"))
            for ev in runner.events
            if ev.get("event") == "runner_on_ok" and ev["event_data"].get("res", {}).get("changed")]


def _failure_messages(runner):
    out = []
    for ev in runner.events:
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            res = ev["event_data"].get("res", {})
            out.append("%s: %s" % (ev["event_data"].get("host"), res.get("msg", res)))
    return out


def _ssh(host, command):
    return subprocess.run(["ssh", "-F", os.path.join(SIM_DIR, "ssh_config"), host, command],
                          capture_output=True, text=True, timeout=120, check=False)


def test_site_twice_second_run_changes_nothing(tmp_path):
    inventory = os.path.join(SCENARIO, "inventory")
    first = _run_site(tmp_path / "first", inventory)
    assert first.rc == 0, _failure_messages(first)
    second = _run_site(tmp_path / "second", inventory)
    assert second.rc == 0, _failure_messages(second)
    assert _changed_tasks(second) == [], "changed on the second run: %s" % _changed_tasks(second)


def _hosts(inv):
    spark = inv["all"]["children"]["spark"]["children"]
    return spark["spark_head"]["hosts"], spark["spark_workers"]["hosts"]


def _set(path, key, value):
    def edit(inv, group_vars):
        group_vars[key] = value
    edit.__name__ = "set_%s" % key
    return edit


def _host_set(which, key, value):
    def edit(inv, group_vars):
        heads, workers = _hosts(inv)
        target = heads if which == "head" else workers
        target[next(iter(target))][key] = value
    return edit


def _del_rails(inv, group_vars):
    heads, workers = _hosts(inv)
    del workers[next(iter(workers))]["dgxspark_fabric_rails"]


def _dup_address(inv, group_vars):
    heads, workers = _hosts(inv)
    head = heads[next(iter(heads))]
    workers[next(iter(workers))]["dgxspark_fabric_rails"] = copy.deepcopy(head["dgxspark_fabric_rails"])


def _two_heads(inv, group_vars):
    heads, workers = _hosts(inv)
    name = next(iter(workers))
    heads[name] = workers.pop(name)
    workers["spark-worker-ghost"] = {"ansible_host": "10.77.2.99",
                                     "dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.110.9"}]}


def _other_subnet(inv, group_vars):
    heads, workers = _hosts(inv)
    workers[next(iter(workers))]["dgxspark_fabric_rails"] = [{"netdev": "enp1s0f1np1", "ipv4": "192.168.111.2"}]


# (id, edit, words the failure message must contain)
BAD_INVENTORY = [
    ("rails-not-a-list", _host_set("worker", "dgxspark_fabric_rails", "192.168.110.2"),
     ["dgxspark_fabric_rails"]),
    ("rail-bad-address", _host_set("worker", "dgxspark_fabric_rails", [{"netdev": "enp1s0f1np1", "ipv4": "192.168.110.300"}]),
     ["dgxspark_fabric_rails[0].ipv4", "192.168.110.300"]),
    ("rail-missing-netdev", _host_set("worker", "dgxspark_fabric_rails", [{"ipv4": "192.168.110.2"}]),
     ["dgxspark_fabric_rails[0].netdev"]),
    ("missing-fabric-address", _del_rails, ["dgxspark_fabric_rails", "spark-worker"]),
    ("duplicate-addresses", _dup_address, ["also spark-head's address"]),
    ("two-heads", _two_heads, ["spark_head has 2 hosts"]),
    ("two-subnets", _other_subnet, ["outside 192.168.110.0/24"]),
    ("prefix-a-string", _set("all", "dgxspark_fabric_prefix", "24"), ["dgxspark_fabric_prefix"]),
    ("bool-as-string", _set("all", "nic_reboot_ok", "yes"), ["nic_reboot_ok", "boolean"]),
    ("mtu-a-string", _set("all", "nic_mtu", "jumbo"), ["nic_mtu"]),
]


@pytest.fixture(scope="module")
def stamp():
    """A file on every node; a bad run must leave nothing newer than it."""
    for host in ("spark-head", "spark-worker"):
        proc = _ssh(host, "sudo touch /var/tmp/dgxspark-bad-input.stamp && sleep 1")
        assert proc.returncode == 0, proc.stderr
    return "/var/tmp/dgxspark-bad-input.stamp"


@pytest.mark.parametrize("case", BAD_INVENTORY, ids=[c[0] for c in BAD_INVENTORY])
def test_bad_inventory_fails_early_and_names_the_variable(tmp_path, stamp, case):
    _, edit, words = case
    inventory = _copy_inventory(tmp_path / "inventory")
    hosts_file = os.path.join(inventory, "hosts.yml")
    with open(hosts_file, encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    group_vars = {}
    edit(inv, group_vars)
    with open(hosts_file, "w", encoding="utf-8") as handle:
        yaml.safe_dump(inv, handle)
    if group_vars:
        with open(os.path.join(inventory, "group_vars", "spark", "zz-case.yml"), "w", encoding="utf-8") as handle:
            yaml.safe_dump(group_vars, handle)
    runner = _run_site(tmp_path, inventory)
    messages = " | ".join(_failure_messages(runner))
    assert runner.rc != 0, "site.yml passed with bad input"
    for word in words:
        assert word in messages, "%r not in the failure: %s" % (word, messages)
    assert "Traceback" not in messages
    assert _changed_tasks(runner) == []
    for host in ("spark-head", "spark-worker"):
        proc = _ssh(host, "sudo find %s -xdev -newer %s -type f 2>/dev/null | grep -v '^/etc/ssh/' | head -20"
                    % (NODE_PATHS, stamp))
        assert proc.stdout.strip() == "", "%s changed: %s" % (host, proc.stdout)
