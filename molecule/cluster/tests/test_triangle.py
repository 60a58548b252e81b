"""The direct shape for three nodes (issue 28), last in the cluster scenario's verify (conftest.py): the four nodes
behind the switch are re-cabled the way the DSpark recipe's 3-node launcher cables them (MiaAI-Lab/DSpark PR #196,
docs/TP3.md). spark-worker3 is powered off and leaves; spark-sim recable puts each of the other three nodes' two
rails on a cable of its own to each other node (one /24 per cable, molecule/cluster/triangle); then site.yml with
that inventory, the one command an owner runs after re-cabling, converges TP=3 with RDMA over the cables and the TCP
bootstrap on the LAN (dgxspark_bootstrap), and a second run changes nothing.

Each test runs once (no testinfra host: spark-worker3 is off), over the controller's pinned ssh config."""

import os
import re
import subprocess
import sys

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
TRIANGLE = os.path.join(SCENARIO, "triangle")
SIM_DIR = os.environ.get("SPARK_SIM_DIR") or os.path.join(PROJECT, ".sim", "molecule-cluster")
GONE = "spark-worker3"


def _nodes():
    with open(os.path.join(TRIANGLE, "hosts.yml"), encoding="utf-8") as handle:
        tri = yaml.safe_load(handle)["all"]["children"]["spark"]["children"]["triangle"]["children"]
    nodes = dict(tri["spark_head"]["hosts"])
    nodes.update(tri["spark_workers"]["hosts"])
    return nodes


NODES = _nodes()
ORDER = list(NODES)  # the head first: the ranks
HEAD = ORDER[0]


def _env():
    # profile_tasks: each task's time in the run's log (.cache/molecule/triangle-*.log), where the gate's minutes go
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(PROJECT, "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=os.path.join(PROJECT, "collections"), SPARK_SIM_DIR=SIM_DIR,
                ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks")


def _ssh(host, command):
    proc = subprocess.run(["ssh", "-F", os.path.join(SIM_DIR, "ssh_config"), host, "sudo -n sh -c %s" % _quote(command)],
                          capture_output=True, text=True, timeout=120, check=False)
    return proc


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def _site():
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return subprocess.run([playbook, "-i", TRIANGLE, os.path.join(PROJECT, "site.yml")], capture_output=True,
                          text=True, env=_env(), cwd=PROJECT, timeout=1800, check=False)


def _recap(stdout):
    return dict(re.findall(r"^(\S+)\s*:\s*(ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=\d+)", stdout.rsplit("PLAY RECAP", 1)[-1], re.M))


@pytest.fixture(scope="module")
def recabled():
    """spark-worker3 off, the triangle cabled, site.yml twice: the two runs."""
    stop = subprocess.run(["docker", "stop", "molecule-cluster-%s" % GONE], capture_output=True, text=True, check=False)
    assert stop.returncode == 0, stop.stderr
    recable = subprocess.run([os.path.join(PROJECT, "sim", "spark-sim"), "-i", TRIANGLE, "recable"], capture_output=True,
                             text=True, env=_env(), cwd=PROJECT, timeout=600, check=False)
    assert recable.returncode == 0, recable.stdout + recable.stderr
    first = _site()
    second = _site() if first.returncode == 0 else first
    for name, run in (("first", first), ("second", second)):
        os.makedirs(os.path.join(PROJECT, ".cache", "molecule"), exist_ok=True)
        with open(os.path.join(PROJECT, ".cache", "molecule", "triangle-%s-run.log" % name), "w",
                  encoding="utf-8") as handle:
            handle.write(run.stdout + run.stderr)
    return first, second


def test_site_converges_the_triangle_and_a_second_run_changes_nothing(recabled):
    first, second = recabled
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
    recap = _recap(first.stdout)
    assert sorted(recap) == sorted(ORDER), recap
    assert all("failed=0" in v and "unreachable=0" in v for v in recap.values()), recap
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-2000:]
    again = _recap(second.stdout)
    assert all(re.search(r"changed=0\s", v + " ") for v in again.values()), again


def test_every_rank_runs_tensor_parallel_three_and_meets_the_head_on_the_lan(recabled):
    for rank, name in enumerate(ORDER):
        argv = _ssh(name, "systemctl show -p ExecStart --value dgxspark-vllm").stdout
        assert re.search(r"--tensor-parallel-size 3\b", argv) and re.search(r"--nnodes 3\b", argv), argv
        assert re.search(r"--node-rank %d\b" % rank, argv), argv
        # rail 0 of the head reaches spark-worker only: every rank meets it on the LAN
        assert "--master-addr %s " % NODES[HEAD]["dgxspark_bootstrap"]["ipv4"] in argv + " ", argv
        assert _ssh(name, "systemctl is-active dgxspark-vllm").stdout.strip() == "active", name


def test_rdma_runs_over_both_cables_and_the_bootstrap_over_the_lan(recabled):
    for name in ORDER:
        env = dict(line.split("=", 1) for line in _ssh(name, "cat /run/dgxspark/nccl.env").stdout.splitlines()
                   if "=" in line and not line.startswith("#"))
        boot = NODES[name]["dgxspark_bootstrap"]
        assert env.get("VLLM_HOST_IP") == boot["ipv4"], (name, env)
        assert env.get("NCCL_SOCKET_IFNAME") == "=" + boot["netdev"] and env.get("GLOO_SOCKET_IFNAME") == boot["netdev"], env
        assert len(env.get("NCCL_IB_HCA", "").lstrip("=").split(",")) == 2, env   # one HCA per cable
        assert env.get("NCCL_IB_GID_INDEX") == str(NODES[name]["spark_sim_gid_index_v2"]), env
        static = _ssh(name, "cat /etc/dgxspark/nccl-static.env").stdout
        for line in ("NCCL_IB_SUBNET_AWARE_ROUTING=1", "NCCL_IB_SUBNET_PREFIX_LEN=24", "NCCL_IB_MERGE_NICS=0"):
            assert line in static.splitlines(), (name, static)


def test_the_head_serves_with_three_ranks(recabled):
    proc = _ssh(HEAD, "python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888"
                      " --served-model-name deepseek-v4-flash-0731 --max-model-len 1048576"
                      " --secret-env-file /etc/dgxspark/vllm-secret.env")
    assert proc.returncode == 0, proc.stdout + proc.stderr
