"""doctor.yml against the converged, serving pair, without a new converge (issue 26).

The healthy pair: every check PASS on both nodes at quick and at full level (the NCCL all-reduce WARNs "not
measured", as designed in this slice), changed=0, the JSON report written. Then a fault of two classes at once, one
per node, put back after, also when the case fails: an MTU of 1500 on the worker's second rail (fabric-mtu FAILs on
the worker, naming the head's 9000), the head's SM clock lock lost (gpu-clock-cap FAILs on the head, naming the
clock read back); every other check still PASSes. Read-only: the files under /etc/dgxspark and /etc/systemd/system,
nccl.env and the clock cap's status, the serving and clock cap units' states, main PIDs, restart counts and
invocations are the same on both nodes before and after every run, and no measurement unit is left.
"""

import glob
import json
import os
import subprocess
import sys
import time

import ansible_runner
import pytest
import siterun

WORKER_RAIL1 = "enP2p1s0f1np1"
ALLREDUCE = {("spark-head", "nccl-allreduce"): "WARN", ("spark-worker", "nccl-allreduce"): "WARN"}
SNAPSHOT = (
    "sudo sh -c 'find /etc/dgxspark /etc/systemd/system -xdev -type f -print0 | sort -z | xargs -0 sha256sum; "
    "sha256sum /run/dgxspark/nccl.env /run/dgxspark/clock-cap.status; "
    "systemctl show dgxspark-vllm.service dgxspark-clock-cap.service "
    "--property=Id,ActiveState,SubState,MainPID,NRestarts,InvocationID; "
    "systemctl list-units --all --plain --no-legend \"dgxspark-ib-write-bw*\"'"
)
TIMES = {}


def spark_sim(*args):
    env = dict(os.environ, **siterun.envvars())
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([os.path.join(siterun.PROJECT, "sim", "spark-sim"), "-i", siterun.INVENTORY, *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def snapshot():
    out = {}
    for host in siterun.HOSTS:
        proc = siterun.ssh(host, SNAPSHOT)
        assert proc.returncode == 0, proc.stderr
        out[host] = proc.stdout
    return out


def doctor(tmp_path, name, extravars=None):
    """doctor.yml through ansible-runner; returns (runner, the JSON report, wall seconds)."""
    private = tmp_path / ("runner-" + name)
    private.mkdir(parents=True, exist_ok=True)
    reports = tmp_path / ("reports-" + name)
    before = snapshot()
    started = time.monotonic()
    runner = ansible_runner.run(private_data_dir=str(private), playbook=os.path.join(siterun.PROJECT, "doctor.yml"),
                                inventory=siterun.INVENTORY, envvars=siterun.envvars(),
                                extravars=dict({"doctor_report_dir": str(reports)}, **(extravars or {})),
                                quiet=True, timeout=900)
    took = time.monotonic() - started
    assert snapshot() == before, "doctor changed something on the nodes"
    files = glob.glob(str(reports / "*_doctor_*.json"))
    assert len(files) == 1, (files, siterun.failure_messages(runner))
    with open(files[0]) as handle:
        report = json.load(handle)
    assert siterun.changed_tasks(runner) == []
    return runner, report, took


def not_pass(report):
    return {(r["host"], r["check"]): r["status"] for r in report["results"] if r["status"] != "PASS"}


def result(report, host, check):
    return [r for r in report["results"] if r["host"] == host and r["check"] == check][0]


def test_the_healthy_pair_passes_every_check_at_quick_and_full_level_and_nothing_changes(tmp_path):
    for level in ("quick", "full"):
        runner, report, took = doctor(tmp_path, level, {"doctor_level": level})
        TIMES[level] = took
        assert not_pass(report) == ALLREDUCE, [r for r in report["results"] if r["status"] != "PASS"]
        assert runner.rc == 0, siterun.failure_messages(runner)
        assert report["level"] == level and report["counts"]["FAIL"] == 0
        hosts = {r["host"] for r in report["results"]}
        assert hosts == set(siterun.HOSTS)
        checks = {r["check"] for r in report["results"]}
        assert ("fabric-bandwidth" in checks) == (level == "full")
        assert {"fabric-links", "fabric-mtu", "fabric-gid-index", "gpu-driver", "gpu-clock-cap", "platform-leftovers",
                "parity-vllm-env", "parity-unit-argv", "checkpoint-record", "serving-unit",
                "serving-completion"} <= checks
        assert "1-token completion + chat completion in" in result(report, "spark-head", "serving-completion")["evidence"]
    print("doctor wall time: quick %.1f s, full %.1f s" % (TIMES["quick"], TIMES["full"]))
    assert result(report, "spark-worker", "fabric-bandwidth")["evidence"].startswith("rail 0 (enp1s0f1np1)")


@pytest.fixture()
def faults():
    """The head's clock lock and the worker's rail MTU put back as they were, also when the case fails."""
    state = json.loads(siterun.ssh("spark-head", "sudo cat /var/lib/spark-sim/state.json").stdout)
    lock = state["gpu"]["locked_clocks"]
    assert lock and lock["max_mhz"] == 2100, lock
    yield
    spark_sim("state", "spark-head", "--set", "gpu.locked_clocks=%s" % json.dumps(lock))
    proc = siterun.ssh("spark-worker", "sudo ip link set dev %s mtu 9000" % WORKER_RAIL1)
    assert proc.returncode == 0, proc.stderr


def test_a_fault_of_two_classes_fails_exactly_its_check_on_exactly_its_node(tmp_path, faults):
    # fabric: one end of rail 1 at MTU 1500 (a pair that ran at a small MTU unnoticed is a public report)
    proc = siterun.ssh("spark-worker", "sudo ip link set dev %s mtu 1500" % WORKER_RAIL1)
    assert proc.returncode == 0, proc.stderr
    # gpu: the head's SM clock lock lost (what a reboot does before the cap unit runs again)
    spark_sim("state", "spark-head", "--set", "gpu.locked_clocks=null")
    runner, report, took = doctor(tmp_path, "faults")
    print("doctor wall time with two faults: quick %.1f s" % took)
    expected = dict(ALLREDUCE)
    expected.update({("spark-worker", "fabric-mtu"): "FAIL", ("spark-head", "gpu-clock-cap"): "FAIL"})
    assert not_pass(report) == expected, report["results"]
    found = result(report, "spark-worker", "fabric-mtu")
    assert found["evidence"] == "%s MTU 1500, expected 9000 (peer: spark-head 9000)" % WORKER_RAIL1, found
    assert found["remedy"].startswith("Set MTU 9000 on this rail's netdev on both nodes")
    assert result(report, "spark-head", "fabric-mtu")["evidence"].endswith("%s MTU 9000 (peer: spark-worker 1500)"
                                                                           % WORKER_RAIL1)
    found = result(report, "spark-head", "gpu-clock-cap")
    assert "SM clock 2405 MHz, cap 2100 MHz (read back above the cap: the lock is lost)" in found["evidence"], found
    assert found["remedy"].startswith("Start dgxspark-clock-cap.service again")
    assert runner.rc != 0
    messages = siterun.failure_messages(runner)
    assert any("doctor quick: 2 check(s) failed: spark-worker fabric-mtu, spark-head gpu-clock-cap" in m
               for m in messages), messages
