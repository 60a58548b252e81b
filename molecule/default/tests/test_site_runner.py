"""site.yml driven through ansible-runner against the converged default pair
(after the reboot of side_effect).

- Tag-limited runs (the tags the service role recommends) change nothing and restart no rank.
  (The first full run after the reboot, with drift made first, is the newest controller's:
  test_site_via_newest_controller.py.)
- Bad inventory input: one case per row, each must fail in the preflight play,
  before anything changes, with a message that names the variable and never
  a secret's value; afterwards the nodes read back as a snapshot taken before
  the bad runs (files, directories, links with owner, mode, size and mtime;
  checksums of /etc/dgxspark and the units; owner and mode of /, of the cache
  and its parents; when the units last started). The
  rows run four at a time (each is its own ansible-runner process on its own
  copy of the inventory).

These tests do not use testinfra's ``host`` fixture: they run once, from the
controller, while molecule's verify step has the sim up.
"""

import concurrent.futures
import copy
import os
import shlex

import pytest
import siterun
import yaml

NODE_PATHS = "/etc /usr/local /var/lib/dgxspark /opt"


@pytest.mark.parametrize("tags", ["service", "runtime,service"])
def test_a_tag_limited_run_changes_nothing_and_keeps_serving_offline(tmp_path, tags):
    """The tags roles/service/tasks/validate.yml recommends (runtime,service), and the service play alone, which reads
    the runtime role's record without its play (--tags runtime alone runs a subset of runtime,service's tasks and
    was cut from the gate: 82-166 s of a lane): the offline flag comes from each node's own record
    of what the checkpoint role verified there, so a run without the checkpoint play renders exactly what a
    full run rendered (HF_HUB_OFFLINE=1) and restarts no rank."""
    before = {host: siterun.ssh(host, "systemctl show --property=ExecMainStartTimestampMonotonic "
                                      "dgxspark-vllm.service; sudo cat /etc/dgxspark/vllm.env") for host in siterun.HOSTS}
    run = siterun.run_site(tmp_path / tags.replace(",", "-"), cmdline="--tags %s" % tags)
    assert run.rc == 0, siterun.failure_messages(run)
    assert siterun.changed_tasks(run) == [], "--tags %s changed: %s" % (tags, siterun.changed_tasks(run))
    counts = siterun.ok_counts(run)
    assert sorted(counts) == list(siterun.HOSTS) and min(counts.values()) > 0, counts
    for host in siterun.HOSTS:
        after = siterun.ssh(host, "systemctl show --property=ExecMainStartTimestampMonotonic "
                                  "dgxspark-vllm.service; sudo cat /etc/dgxspark/vllm.env")
        assert after.returncode == 0, after.stderr
        assert "\nHF_HUB_OFFLINE=1\n" in after.stdout and "\nTRANSFORMERS_OFFLINE=1\n" in after.stdout, after.stdout
        assert after.stdout == before[host].stdout, "%s: vllm.env or the rank's start changed under --tags %s" % (host, tags)




def _hosts(inv):
    spark = inv["all"]["children"]["spark"]["children"]
    return spark["spark_head"]["hosts"], spark["spark_workers"]["hosts"]


def _set(path, key, value):
    def edit(inv, group_vars):
        group_vars[key] = value
    edit.__name__ = "set_%s" % key
    return edit


def _sets(**values):
    def edit(inv, group_vars):
        group_vars.update(values)
    return edit


def _extra(key, value):
    """An extra var (-e) instead of an inventory value."""
    def edit(inv, group_vars):
        group_vars.setdefault(EXTRA, {})[key] = value
    return edit


EXTRA = "__extravars"


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


def _third_node(rails_by_host, shape, **more):
    """A third node (never reached: the preflight stops before it connects) and each node's rails, in a shape."""
    def edit(inv, group_vars):
        heads, workers = _hosts(inv)
        workers["spark-worker-third"] = {"ansible_host": "10.77.2.98"}
        for host, addresses in rails_by_host.items():
            node = heads.get(host) or workers[host]
            node["dgxspark_fabric_rails"] = [{"netdev": ("enp1s0f1np1", "enP2p1s0f1np1")[i], "ipv4": a}
                                             for i, a in enumerate(addresses)]
        group_vars["dgxspark_fabric_shape"] = shape
        group_vars.update(more)
    return edit


def _bootstrap(head_ipv4, worker_ipv4):
    """Both nodes name their LAN (the management network: enP7s7, the RJ45 port) as the bootstrap network."""
    def edit(inv, group_vars):
        heads, workers = _hosts(inv)
        heads[next(iter(heads))]["dgxspark_bootstrap"] = {"netdev": "enP7s7", "ipv4": head_ipv4}
        workers[next(iter(workers))]["dgxspark_bootstrap"] = {"netdev": "enP7s7", "ipv4": worker_ipv4}
    return edit


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
    ("two-subnets", _other_subnet, ["spark-head: rail 0 (enp1s0f1np1, 192.168.110.1) is on subnet 192.168.110.0/24, which no other node is on",
                                    "spark-worker: reaches the head over no rail"]),
    # the preflight role's argument spec (choices) names it first, before the topology is derived
    ("shape-unknown", _set("all", "dgxspark_fabric_shape", "ring"), ["dgxspark_fabric_shape must be one of: direct, switch, got: ring"]),
    ("prefix-a-string", _set("all", "dgxspark_fabric_prefix", "24"), ["dgxspark_fabric_prefix"]),
    # issue 28: three nodes behind a switch need the attention-group pad for TP=3; a triangle of cables needs a
    # bootstrap network every node reaches
    ("three-nodes-tp3-without-pad", _third_node({"spark-worker-third": ["192.168.110.3", "192.168.115.3"]}, "switch"),
     ["tensor parallel 3 (3 nodes) does not divide the 8 attention groups", "runtime_vllm_attention_group_pad"]),
    ("three-nodes-direct-triangle", _third_node({"spark-head": ["192.168.110.1", "192.168.111.1"],
                                                 "spark-worker": ["192.168.110.2", "192.168.112.1"],
                                                 "spark-worker-third": ["192.168.111.2", "192.168.112.2"]}, "direct",
                                                runtime_vllm_attention_group_pad=True),
     ["spark-head: dgxspark_bootstrap is not set", "reaches one other node only", "VLLM_HOST_IP"]),
    # the live check of the bootstrap network: a node that does not carry the address it names
    ("bootstrap-address-not-carried", _bootstrap("10.77.2.11", "10.77.2.97"),
     ["spark-worker: dgxspark_bootstrap is enP7s7 10.77.2.97", "enP7s7 carries 10.77.2.12", "Nothing was changed"]),
    ("bool-as-string", _set("all", "nic_reboot_ok", "yes"), ["nic_reboot_ok", "boolean"]),
    # the roles' own checks (tasks/validate.yml), run by the preflight play
    ("mtp-3", _set("all", "runtime_vllm_mtp_num_tokens", 3),
     ["runtime_vllm_mtp_num_tokens", "is 3, expected at least 5"]),
    ("kv-cache-dtype-unknown", _set("all", "runtime_vllm_kv_cache_dtype", "fp16"),
     ["runtime_vllm_kv_cache_dtype", "'fp16'", "fp8_ds_mla, nvfp4_ds_mla"]),
    ("vllm-env-sets-a-fabric-knob", _set("all", "runtime_vllm_env", {"NCCL_CROSS_NIC": "0", "NCCL_DEBUG": "INFO"}),
     ["runtime_vllm_env sets NCCL_CROSS_NIC, which", "nic_nccl_static_env sets too"]),
    ("clock-cap-9999", _set("all", "clock_cap_max_mhz", 9999),
     ["clock_cap_max_mhz=9999", "outside the range"]),
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
    ("fabric-ssh-closed-port", _set("all", "preflight_fabric_ssh_port", 2222),
     ["cannot reach ssh on the fabric address of spark-worker", "preflight_fabric_ssh_port"]),
    # issue 13: path knobs absolute, normalised, not / nor a top-level system directory (one row; every other path
    # form is a unit test of path_problem, tests/unit/plugins/filter/test_inventory.py)
    ("cache-dir-etc", _set("all", "checkpoint_cache_dir", "/etc"), ["checkpoint_cache_dir is '/etc'", "top-level system directory"]),
    # names, netdevs and the served model name that reach scripts, units and configs
    ("served-name-newline", _set("all", "runtime_vllm_served_model_name", "flash\nVLLM_API_KEY=x"),
     ["runtime_vllm_served_model_name", "line break"]),
    ("netdev-newline", _host_set("worker", "dgxspark_fabric_rails", [{"netdev": "enp1s0f1np1\nx", "ipv4": "192.168.110.2"}]),
     ["dgxspark_fabric_rails[0].netdev", "expected a netdev name"]),
    ("api-key-quote-newline", _set("all", "runtime_vllm_api_key", "k'ey\nX=1"), ["runtime_vllm_api_key is ****", "safe set"]),
    # a misspelt variable, in the inventory or as an extra var
    ("typo-max-num-seq", _set("all", "runtime_vllm_max_num_seq", 8),
     ["runtime_vllm_max_num_seq is set", "did you mean runtime_vllm_max_num_seqs?"]),
    ("typo-extra-var-nic-rebot-ok", _extra("nic_rebot_ok", True), ["nic_rebot_ok is set", "did you mean nic_reboot_ok?"]),
    # values the seeds rule out
    ("block-size-64", _set("all", "runtime_vllm_block_size", 64),
     ["runtime_vllm_block_size is 64, expected 256", "ZeroDivisionError", "runtime_vllm_block_size_override"]),
    # every count and size has its range
    ("sync-streams-0", _set("all", "checkpoint_sync_streams", 0), ["checkpoint_sync_streams is 0, expected between 1 and 64"]),
    ("max-model-len-2m", _extra("runtime_vllm_max_model_len", 2097152),
     ["runtime_vllm_max_model_len is 2097152, expected between 1 and 1048576"]),
    # issue 24, finding 9: values valid alone that collide with each other or with the node
    ("api-port-equals-master-port", _set("all", "runtime_vllm_port", 25000),
     ["runtime_vllm_port and runtime_vllm_master_port are both 25000", "Nothing was changed"]),
    # issue 25: the probe's loopback port and the exporter's are the collection's ports too
    ("exporter-port-is-the-probe-port", _sets(preflight_rdma_probe=True, metrics_exporter_port=18517),
     ["metrics_exporter_port and preflight_rdma_probe_port are both 18517", "Nothing was changed"]),
    ("api-port-is-sshd", _set("all", "runtime_vllm_port", 22),
     ["runtime_vllm_port and preflight_fabric_ssh_port (sshd) are both 22"]),
    ("api-port-held-by-a-system-service", _set("all", "runtime_vllm_port", 5564),
     ["serving ports 5564", "(runtime_vllm_port, runtime_vllm_backend_port, runtime_vllm_master_port)", "spark-sim-hub.service"]),
    ("bandwidth-port-held-by-a-system-service", _set("all", "nic_bandwidth_tcp_port", 5563),
     ["nic_bandwidth_tcp_port + 1 (rail 1) is 5564, held here", "spark-sim-hub.service", "Nothing was changed"]),
    ("image-reference-uppercase", _sets(runtime_kind="container", runtime_container_image="ghcr.io/Anemll/dspark-vllm-gx10:0.1.1"),
     ["runtime_container_image is \"ghcr.io/Anemll/dspark-vllm-gx10:0.1.1\"", "repository name must be lowercase"]),
    ("image-reference-two-tags", _sets(runtime_kind="container", runtime_container_image="ghcr.io/anemll/dspark:0.1:1"),
     ["runtime_container_image", "invalid reference format"]),
    # a secret's value never in a message
    ("hf-token-a-list", _set("all", "checkpoint_hf_token", ["hf_s3cr3tT0kenValue"]), ["checkpoint_hf_token is **** (list)"]),
    # the API beyond loopback without a key
    ("api-open-without-key", _set("all", "runtime_vllm_api_key", ""),
     ["runtime_vllm_host is 0.0.0.0 (not loopback)", "runtime_vllm_api_key is empty", "runtime_vllm_open_api_ok: true"]),
    # issue 19: the platform
    ("wrong-architecture", _set("all", "preflight_allowed_architectures", ["aarch64"]),
     ["architecture is", "expected one of aarch64 (preflight_allowed_architectures)"]),
    ("wrong-distribution", _set("all", "preflight_allowed_distributions", [{"distribution": "Ubuntu", "version": "24.04"}]),
     ["runs Debian", "expected one of Ubuntu 24.04 (preflight_allowed_distributions)"]),
]
# values that must never appear in any message or event of the runs
SECRETS = ["k'ey", "hf_s3cr3tT0kenValue", "sim-quickstart-7c41e9a2d05b"]


def _run_case(tmp_root, case):
    name, edit, _ = case
    tmp_path = tmp_root / name
    inventory = siterun.copy_inventory(tmp_path / "inventory")
    hosts_file = os.path.join(inventory, "hosts.yml")
    with open(hosts_file, encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    group_vars = {}
    edit(inv, group_vars)
    extravars = group_vars.pop(EXTRA, None)
    # No row is about the RDMA memory-registration probe (nic case 7 and the unit tests are): its loopback runs take
    # turns on each node (one lock), so the rows, four at a time, would queue behind it for nothing.
    group_vars.setdefault("preflight_rdma_probe", False)
    with open(hosts_file, "w", encoding="utf-8") as handle:
        yaml.safe_dump(inv, handle)
    if group_vars:
        with open(os.path.join(inventory, "group_vars", "spark", "zz-case.yml"), "w", encoding="utf-8") as handle:
            yaml.safe_dump(group_vars, handle)
    return siterun.run_site(tmp_path, inventory, extravars=extravars)


# What "nothing changed" means on a node: every file, directory and link under these trees (type, owner, mode,
# size and mtime for files), the checksums of /etc/dgxspark and the units, the owner and mode of / and of the
# cache and its parents, and when the units last started. Not /var/lib/dgxspark/metrics: the metrics role's timer
# rewrites node.prom there every metrics_node_interval (15) s on its own, run or no run.
SNAPSHOT = " ; ".join([
    "find %s -xdev \\( -path /etc/ssh -prune \\) -o \\( -path /var/lib/dgxspark/metrics -prune \\) -o \\( -type f -printf '%%p f %%u:%%g %%m %%s %%T@\\n' \\)"
    " -o -printf '%%p %%y %%u:%%g %%m\\n' 2>/dev/null | sort" % NODE_PATHS,
    "find /etc/dgxspark /etc/systemd/system -xdev -type f -name '*' -exec sha256sum {} + 2>/dev/null | sort -k2",
    "stat -c '%n %U:%G %a %F' / /var /var/lib /var/lib/dgxspark /var/lib/dgxspark/huggingface"
    " /var/lib/dgxspark/huggingface/hub /var/lib/dgxspark/checkpoint /opt /opt/dgxspark",
    "systemctl show -p Id -p ActiveEnterTimestamp -p NRestarts dgxspark-vllm.service dgxspark-clock-cap.service",
])
SNAPSHOT_FILE = "/var/tmp/dgxspark-bad-input.%s"


def _snapshot(host, which):
    proc = siterun.ssh(host, "sudo sh -c %s" % shlex.quote("(%s) > %s" % (SNAPSHOT, SNAPSHOT_FILE % which)))
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Snapshot every node, then run site.yml once per row, four at a time."""
    for host in siterun.HOSTS:
        _snapshot(host, "before")
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
    shown = messages + " ".join(str(ev.get("stdout", "")) for ev in runner.events)
    for secret in SECRETS:
        assert secret not in shown, "a secret's value is in the output of %s" % name


# Each row is one check of the preflight play, end to end through site.yml (the stage it stops in, the message it
# assembles, the secrets it masks, nothing changed). The other values of the same check (every path form, character
# set, range, typo, the mtp rule's variants) are unit tests of the function the check calls, where a value costs
# milliseconds instead of a site.yml run: tests/unit/plugins/filter/test_inventory.py (spec_problems, path_problem,
# unknown_variables) and test_vllm.py (the serve command's rules). 25 such rows were moved there from here (~4 CPU-
# seconds each in the gate, benchmarks/gate_cpu.py, 2026-12-07).
ONE_ROW_PER_CHECK = {
    "argument spec": "rails-not-a-list", "inventory": "rail-bad-address", "topology": "two-subnets",
    "parallel layout": "three-nodes-tp3-without-pad", "bootstrap network": "bootstrap-address-not-carried",
    "type": "bool-as-string", "path": "cache-dir-etc", "line break": "served-name-newline",
    "range": "sync-streams-0", "range of an extra var": "max-model-len-2m", "choices": "kv-cache-dtype-unknown",
    "typo in the inventory": "typo-max-num-seq", "typo as an extra var": "typo-extra-var-nic-rebot-ok",
    "secret masked": "api-key-quote-newline", "secret of another type masked": "hf-token-a-list",
    "serve command": "mtp-3", "revision pin": "revision-a-branch", "driver branch": "driver-590-without-enforce",
    "clock range of the GPU": "clock-cap-9999", "paths per host": "cache-dir-per-host", "disk": "disk-too-small",
    "fabric ssh": "fabric-ssh-closed-port", "port collision": "api-port-equals-master-port",
    "port held on the node": "api-port-held-by-a-system-service", "image reference": "image-reference-two-tags",
    "open API": "api-open-without-key", "platform": "wrong-distribution",
}


def test_the_rows_cover_every_class_of_bad_input():
    names = [c[0] for c in BAD_INVENTORY]
    assert len(set(names)) == len(names)
    missing = {check: row for check, row in ONE_ROW_PER_CHECK.items() if row not in names}
    assert not missing, missing


def test_bad_inventory_changed_nothing_on_the_nodes(bad_runs):
    for host in siterun.HOSTS:
        _snapshot(host, "after")
        proc = siterun.ssh(host, "sudo diff %s %s | head -40" % (SNAPSHOT_FILE % "before", SNAPSHOT_FILE % "after"))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "", "%s changed: %s" % (host, proc.stdout)
        proc = siterun.ssh(host, "sudo wc -l < %s" % (SNAPSHOT_FILE % "after"))
        assert int(proc.stdout.strip() or 0) > 100, "the snapshot of %s is too small to mean anything" % host
