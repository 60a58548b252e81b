"""Live state of the molecule cluster scenario (issue 28): four Sparks behind a switch after converge,
idempotence and side_effect (the checkpoint fanned out again with one worker-to-worker link refused, one worker
rebooted, validate.yml). Expected values come from this scenario's inventory.
"""

import json
import os
import re

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = "/var/lib/dgxspark/huggingface/hub"
CKPT_HOME = "/var/lib/dgxspark/checkpoint"


def _inventory():
    with open(os.path.join(SCENARIO, "inventory", "hosts.yml"), encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    hosts = {}
    for group in ("spark_head", "spark_workers"):
        for name, hvars in inv["all"]["children"]["spark"]["children"][group]["hosts"].items():
            hosts[name] = dict(hvars, group=group)
    return hosts


HOSTS = _inventory()
ORDER = list(HOSTS)  # the head first, the workers in inventory order: the ranks
HEAD = ORDER[0]
_HEAD_BLOBS = {}  # the first host's listing (testinfra runs the head first), compared on the others


@pytest.fixture()
def name(host):
    return host.backend.get_hostname()


def _fanout_log():
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "fanout-run.log")
    assert os.path.exists(path), "side_effect left no fan-out run log at %s" % path
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_every_rank_runs_with_tensor_parallel_four(host, name):
    argv = host.check_output("systemctl show -p ExecStart --value dgxspark-vllm")
    rank = ORDER.index(name)
    assert re.search(r"--tensor-parallel-size 4\b", argv), argv
    assert re.search(r"--nnodes 4\b", argv) and re.search(r"--node-rank %d\b" % rank, argv), argv
    # behind a switch every rank meets the head on its rail 0 address
    assert "--master-addr %s " % HOSTS[HEAD]["dgxspark_fabric_rails"][0]["ipv4"] in argv + " ", argv
    assert ("--headless" in argv) == (rank > 0), argv
    assert host.service("dgxspark-vllm").is_running


def test_the_head_serves_with_all_four_ranks_and_the_workers_serve_no_api(host, name):
    if name != HEAD:
        assert not host.socket("tcp://0.0.0.0:8888").is_listening
        return
    proc = host.run("python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888"
                    " --served-model-name deepseek-v4-flash-0731 --max-model-len 1048576"
                    " --secret-env-file /etc/dgxspark/vllm-secret.env")
    assert proc.rc == 0, proc.stdout + proc.stderr


def test_each_rank_has_its_own_gid_index(host, name):
    env = host.file("/run/dgxspark/nccl.env").content_string.splitlines()
    assert "NCCL_IB_GID_INDEX=%d" % HOSTS[name]["spark_sim_gid_index_v2"] in env, env


def test_a_worker_trusts_each_sender_only_from_its_link_and_only_into_the_cache(host, name):
    """The fan-out's keys: a worker authorizes the head and the other workers, each key from that node's address only,
    each with the same restricted rrsync command; the head authorizes nobody."""
    keys = host.run("cat %s/.ssh/authorized_keys" % CKPT_HOME)
    if name == HEAD:
        assert keys.rc != 0 or not keys.stdout.strip(), keys.stdout
        return
    lines = keys.stdout.strip().splitlines()
    senders = [h for h in ORDER if h != name]
    assert len(lines) == len(senders), lines
    froms = [re.match(r'from="([^"]+)",restrict,command="', line).group(1) for line in lines]
    assert froms == [HOSTS[h]["dgxspark_fabric_rails"][0]["ipv4"] for h in senders]
    assert all("rrsync -wo -no-del -no-lock %s\"" % CACHE in line for line in lines), lines
    assert len(set(line.split()[-1] for line in lines)) == len(lines), "one key per sender"


def test_every_copy_is_verified_and_identical(host, name):
    record = host.file("/var/lib/dgxspark/checkpoint-verified.json")
    assert record.exists, "no offline record on %s" % name
    data = json.loads(record.content_string)
    assert data["verified_all"] is True and data["nodes"] == ORDER, data
    # the same content on every node: the blobs' names are their hashes (the manifest the head verified)
    blobs = host.check_output("ls %s/%s/blobs | sort | sha256sum" % (CACHE, data["snapshot"].split("/")[-3]))
    head_blobs = host.backend.get_hostname() and _HEAD_BLOBS.setdefault("sum", blobs)
    assert blobs == head_blobs


def test_the_fanout_sent_worker_to_worker_and_retried_a_sync_cut_mid_way_from_another_holder():
    """Round 1: spark-worker (a holder) to spark-worker2, the head to spark-worker3 (reset after its first 300 kB:
    it fails mid-way); round 2: spark-worker3 from a worker holding a verified copy, not the head again."""
    log = _fanout_log()
    rounds = re.findall(r"(spark-worker\d?): round (\d+) of the fan-out, from (\S+)", log)
    assert ("spark-worker2", "1", "spark-worker") in rounds and ("spark-worker3", "1", "spark-head") in rounds, rounds
    retried = [r for r in rounds if r[0] == "spark-worker3" and r[1] == "2"]
    assert retried and retried[0][2] in ("spark-worker", "spark-worker2"), rounds
    assert re.search(r"spark-worker3: from spark-head: the sync failed", log), log[-3000:]
    assert re.search(r"spark-worker2: from spark-worker: \S+\s+to 192\.168\.180\.3 over ssh", log), "no worker-to-worker copy"
    assert "after a failed sync from spark-head" in log
    assert not re.search(r"spark-worker: round", log), "spark-worker held its copy: it is no target"


def test_the_rebooted_worker_serves_again_from_a_rank_started_after_its_boot(host, name):
    started = int(host.check_output("systemctl show -p ExecMainStartTimestamp --value --timestamp=unix dgxspark-vllm").lstrip("@"))
    boot = int(host.check_output("stat -c %Y /run/spark-sim/boot_id"))
    assert started >= boot, "%s: the rank started before this boot" % name
    log = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "after-reboot-run.log")
    assert os.path.exists(log), "side_effect left no log of the run after the reboot"
    with open(log, encoding="utf-8") as handle:
        recap = handle.read().rsplit("PLAY RECAP", 1)[-1]
    assert re.search(r"%s\s*:\s*ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0" % re.escape(name), recap), recap
