"""site.yml driven through ansible-runner against the converged default pair
(after the reboot of side_effect).

- site.yml run twice: neither run has a changed task on any host (asserted
  from the event stream, naming the offenders): the first is the re-run after
  the reboot, the second the plain idempotence of a re-run.
- Bad inventory input: one case per row, each must fail in the preflight play,
  before anything changes, with a message that names the variable; afterwards
  nothing on the nodes is newer than a stamp taken before the bad runs. The
  rows run four at a time (each is its own ansible-runner process on its own
  copy of the inventory).

These tests do not use testinfra's ``host`` fixture: they run once, from the
controller, while molecule's verify step has the sim up.
"""

import concurrent.futures
import copy
import os

import pytest
import siterun
import yaml

NODE_PATHS = "/etc /usr/local /var/lib/dgxspark /opt"
STAMP = "/var/tmp/dgxspark-bad-input.stamp"


def test_site_twice_after_the_reboot_changes_nothing(tmp_path):
    first = siterun.run_site(tmp_path / "first")
    assert first.rc == 0, siterun.failure_messages(first)
    assert siterun.changed_tasks(first) == [], "changed on the re-run after the reboot: %s" % siterun.changed_tasks(first)
    # the reboot reshuffled the GIDs: the nic role's stamp no longer holds, so this run converged in full
    reports = siterun.fast_path_reports(first)
    assert sorted(reports) == list(siterun.HOSTS), reports
    assert all(": full run: " in msg for msg in reports.values()), reports
    assert any("nic: " in msg for msg in reports.values()), reports
    assert min(siterun.ok_counts(first).values()) > 100, siterun.ok_counts(first)
    second = siterun.run_site(tmp_path / "second")
    assert second.rc == 0, siterun.failure_messages(second)
    assert siterun.changed_tasks(second) == [], "changed on the second run: %s" % siterun.changed_tasks(second)
    # nothing drifted since the first run recorded its stamps: the fast path, a handful of tasks per host
    reports = siterun.fast_path_reports(second)
    assert all("nothing drifted on any node" in msg for msg in reports.values()) and len(reports) == 2, reports
    assert max(siterun.ok_counts(second).values()) < 30, siterun.ok_counts(second)


# (host, what to break, what the fast-path report must name, the task that must repair it)
DRIFT = [
    ("spark-worker", "sudo rm -f /etc/dgxspark/nccl-static.env",
     "path:/etc/dgxspark/nccl-static.env: was file", "Write the static NCCL settings the resolver merges in"),
    ("spark-head", "sudo chmod 0600 /etc/apt/apt.conf.d/51dgxspark-nvidia-driver",
     "path:/etc/apt/apt.conf.d/51dgxspark-nvidia-driver: was file 0644", "Keep unattended-upgrades away from the NVIDIA driver and CUDA packages"),
]


def test_drift_on_a_node_turns_the_fast_path_off_and_is_repaired(tmp_path):
    """Break what two roles manage on two nodes of a converged pair: the next run names the drift, converges in
    full and repairs exactly that; the run after it takes the fast path again."""
    for host, command, _, _ in DRIFT:
        proc = siterun.ssh(host, command)
        assert proc.returncode == 0, proc.stderr
    repair = siterun.run_site(tmp_path / "repair")
    assert repair.rc == 0, siterun.failure_messages(repair)
    reports = siterun.fast_path_reports(repair)
    changed = siterun.changed_tasks(repair)
    for host, _, named, task in DRIFT:
        assert named in reports[host], reports
        assert any(line.startswith(host + ": ") and line.endswith(task) for line in changed), changed
    again = siterun.run_site(tmp_path / "again")
    assert again.rc == 0, siterun.failure_messages(again)
    assert siterun.changed_tasks(again) == [], siterun.changed_tasks(again)
    assert all("nothing drifted on any node" in msg for msg in siterun.fast_path_reports(again).values())


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
    # the roles' own checks (tasks/validate.yml), run by the preflight play
    ("mtp-3", _set("all", "runtime_vllm_mtp_num_tokens", 3),
     ["runtime_vllm_mtp_num_tokens", "is 3, expected at least 5"]),
    ("gpu-utilization-0.95", _set("all", "runtime_vllm_gpu_memory_utilization", 0.95),
     ["runtime_vllm_gpu_memory_utilization", "0.95", "at most 0.87"]),
    ("kv-cache-dtype-unknown", _set("all", "runtime_vllm_kv_cache_dtype", "fp16"),
     ["runtime_vllm_kv_cache_dtype", "'fp16'", "fp8_ds_mla, nvfp4_ds_mla"]),
    ("clock-cap-9999", _set("all", "clock_cap_max_mhz", 9999),
     ["clock_cap_max_mhz=9999", "outside the range"]),
    ("revision-empty", _set("all", "checkpoint_revision", ""),
     ["checkpoint_revision is \"\"", "40-hex"]),
    ("revision-short-sha", _set("all", "checkpoint_revision", "9e165c30"),
     ["checkpoint_revision is \"9e165c30\"", "40-hex"]),
    ("revision-a-branch", _set("all", "checkpoint_revision", "main"),
     ["checkpoint_revision is \"main\"", "40-hex"]),
    ("driver-590-without-enforce", _set("all", "driver_version", "590.48.01"),
     ["driver_version", "590.48.01", "580.173.02", "driver_enforce"]),
    ("runtime-kind-docker", _set("all", "runtime_kind", "docker"),
     ["runtime_kind", "'docker'", "venv, container"]),
    # the preflight checks before serving
    ("cache-dir-per-host", _host_set("worker", "checkpoint_cache_dir", "/srv/hub"),
     ["checkpoint_cache_dir differs between the nodes", "spark-worker=/srv/hub"]),
    ("disk-too-small", _set("all", "preflight_min_free_disk_gb", 1000000),
     ["preflight_min_free_disk_gb", "checkpoint_cache_dir", "GB free"]),
    ("stop-leftovers-a-string", _set("all", "preflight_stop_leftovers", "yes"),
     ["preflight_stop_leftovers", "boolean"]),
    ("fabric-ssh-closed-port", _set("all", "preflight_fabric_ssh_port", 2222),
     ["cannot reach ssh on the fabric address of spark-worker", "preflight_fabric_ssh_port"]),
]


def _run_case(tmp_root, case):
    name, edit, _ = case
    tmp_path = tmp_root / name
    inventory = siterun.copy_inventory(tmp_path / "inventory")
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
    return siterun.run_site(tmp_path, inventory)


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Stamp every node, then run site.yml once per row, four at a time."""
    for host in siterun.HOSTS:
        proc = siterun.ssh(host, "sudo touch %s && sleep 1" % STAMP)
        assert proc.returncode == 0, proc.stderr
    root = tmp_path_factory.mktemp("bad-inventory")
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {case[0]: pool.submit(_run_case, root, case) for case in BAD_INVENTORY}
    return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", BAD_INVENTORY, ids=[c[0] for c in BAD_INVENTORY])
def test_bad_inventory_fails_in_preflight_and_names_the_variable(bad_runs, case):
    name, _, words = case
    runner = bad_runs[name]
    messages = " | ".join(siterun.failure_messages(runner))
    assert runner.rc != 0, "site.yml passed with bad input"
    for word in words:
        assert word in messages, "%r not in the failure: %s" % (word, messages)
    assert "Traceback" not in messages
    assert siterun.changed_tasks(runner) == []
    failed_plays = {ev["event_data"].get("play") for ev in runner.events
                    if ev.get("event") in ("runner_on_failed", "runner_on_unreachable")}
    assert failed_plays and all(p.startswith("Preflight") for p in failed_plays), failed_plays


def test_bad_inventory_changed_nothing_on_the_nodes(bad_runs):
    for host in siterun.HOSTS:
        proc = siterun.ssh(host, "sudo test -f %s && sudo find %s -xdev -newer %s -type f 2>/dev/null"
                           " | grep -v '^/etc/ssh/' | head -20" % (STAMP, NODE_PATHS, STAMP))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "", "%s changed: %s" % (host, proc.stdout)
