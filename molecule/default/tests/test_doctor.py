"""doctor.yml against the converged, serving pair, without a new converge (issue 26).

The healthy pair: every check PASS on both nodes at quick and at full level (at the full level the NCCL all-reduce
WARNs that the serving units hold the GPU, as designed: doctor never stops them; the service scenario measures it with
the units stopped), changed=0, the JSON report written. Then one fault of each class that can be
injected on a serving pair, all at once, each on one node and in one check, put back after, also when the case fails:
- fabric: an MTU of 1500 on the worker's second rail (fabric-mtu FAILs on the worker, naming the head's 9000);
- gpu: the head's SM clock lock lost (gpu-clock-cap FAILs on the head, naming the clock read back), and nvidia-uvm
  not loaded on the worker (the sim's nvidia-uvm-missing: nvidia-smi answers, CUDA's init through the runtime fails
  with 999, gpu-cuinit FAILs on the worker with torch's "CUDA unknown error");
- platform: a process titled VLLM::EngineCore outside the serving unit on the worker (platform-leftovers);
- parity: a variable only the worker's vllm.env has (parity-vllm-env FAILs on the worker, naming the key), and
  the worker's ConnectX-7 on an older firmware (parity-firmware WARNs on the worker: a report, never a change);
- checkpoint: an unfinished download (*.incomplete) in the head's cache repo (checkpoint-unfinished);
- serving: the head's engine wedged (the sim's `wedge`: /health and /v1/models answer, requests hang), so the
  1-token completion times out (serving-completion FAILs on the head; serving-health and serving-models PASS).
(nccl: the all-reduce is a full-level measurement; this run is quick.) Every other check still PASSes.
Read-only: the files under /etc/dgxspark and /etc/systemd/system, nccl.env and the clock cap's status, the serving
and clock cap units' states, main PIDs, restart counts and invocations are the same on both nodes before and after
every run, and no measurement unit is left; and after the faults are put back, site.yml --check --diff reports no
change and no failure (the scenario's one check-mode run of site.yml).
"""

import glob
import json
import os
import time

import ansible_runner
import pytest
import siterun

WORKER_RAIL1 = "enP2p1s0f1np1"
ALLREDUCE = {("spark-head", "nccl-allreduce"): "WARN", ("spark-worker", "nccl-allreduce"): "WARN"}   # full level
SNAPSHOT = (
    "sudo sh -c 'find /etc/dgxspark /etc/systemd/system -xdev -type f -print0 | sort -z | xargs -0 sha256sum; "
    "sha256sum /run/dgxspark/nccl.env /run/dgxspark/clock-cap.status; "
    "systemctl show dgxspark-vllm.service dgxspark-clock-cap.service "
    "--property=Id,ActiveState,SubState,MainPID,NRestarts,InvocationID; "
    "systemctl list-units --all --plain --no-legend \"dgxspark-ib-write-bw*\" \"dgxspark-doctor-*\"'"
)
TIMES = {}


spark_sim = siterun.spark_sim  # pylint: disable=invalid-name


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
        assert not_pass(report) == (ALLREDUCE if level == "full" else {}), \
            [r for r in report["results"] if r["status"] != "PASS"]
        assert runner.rc == 0, siterun.failure_messages(runner)
        assert report["level"] == level and report["counts"]["FAIL"] == 0
        hosts = {r["host"] for r in report["results"]}
        assert hosts == set(siterun.HOSTS)
        checks = {r["check"] for r in report["results"]}
        assert ("fabric-bandwidth" in checks) == ("nccl-allreduce" in checks) == (level == "full")
        assert result(report, "spark-worker", "gpu-cuinit")["evidence"].startswith(
            "CUDA initialised through the runtime: 1 device(s), NVIDIA GB10 (torch 0.0.0+spark.sim, CUDA 13.0)")
        assert {"fabric-links", "fabric-mtu", "fabric-gid-index", "gpu-driver", "gpu-clock-cap", "platform-leftovers",
                "parity-vllm-env", "parity-unit-argv", "checkpoint-record", "serving-unit",
                "serving-completion"} <= checks
        assert "1-token completion + chat completion in" in result(report, "spark-head", "serving-completion")["evidence"]
    print("doctor wall time: quick %.1f s, full %.1f s" % (TIMES["quick"], TIMES["full"]))
    assert result(report, "spark-worker", "fabric-bandwidth")["evidence"].startswith("rail 0 (enp1s0f1np1)")
    assert result(report, "spark-head", "nccl-allreduce")["evidence"].startswith(
        "not measured: the serving unit is active on spark-head (active), spark-worker (active): the all-reduce needs "
        "the GPU the ranks hold")


REPO_DIR = "/var/lib/dgxspark/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731"
UNFINISHED = REPO_DIR + "/blobs/doctor-fault.incomplete"
ENV_FILE = "/etc/dgxspark/vllm.env"
ENV_SAVED = "/root/vllm.env.doctor-fault"
LEFTOVER_UNIT = "doctor-fault-leftover.service"
# The worker's ConnectX-7 on an older firmware: 28.39.1002 is a real ConnectX-7 release (tests/fixtures/captures/
# ibstat/01 and 04); the sim's default 28.45.4028 is the GB10's (ibstat/07). One card: all four functions move together.
WORKER_HCAS = ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")
OLD_FIRMWARE = "28.39.1002"


def ok(host, command):
    proc = siterun.ssh(host, command)
    assert proc.returncode == 0, "%s: %s: %s" % (host, command, proc.stderr)
    return proc


@pytest.fixture()
def faults():
    """Every fault put back as it was, also when the case fails (each step on its own: one failing does not skip the
    others)."""
    state = json.loads(siterun.ssh("spark-head", "sudo cat /var/lib/spark-sim/state.json").stdout)
    lock = state["gpu"]["locked_clocks"]
    worker = json.loads(siterun.ssh("spark-worker", "sudo cat /var/lib/spark-sim/state.json").stdout)
    firmware = {hca["name"]: hca["fw"] for hca in worker["hcas"] if hca["name"] in WORKER_HCAS}
    assert sorted(firmware) == sorted(WORKER_HCAS), firmware
    assert lock and lock["max_mhz"] == 2100, lock
    ok("spark-head", "sudo test -d %s/blobs" % REPO_DIR)   # the fixture's own precondition: the verified cache repo
    ok("spark-worker", "sudo cp -p %s %s" % (ENV_FILE, ENV_SAVED))
    yield
    errors = []
    for step in (
            lambda: spark_sim("state", "spark-worker", *["--set=hcas.%s.fw=%s" % (hca, json.dumps(fw))
                                                          for hca, fw in firmware.items()]),
            lambda: spark_sim("fault", "spark-head", "clear"),
            lambda: spark_sim("state", "spark-worker", "--set", "gpu.uvm_loaded=true"),
            lambda: spark_sim("state", "spark-head", "--set", "gpu.locked_clocks=%s" % json.dumps(lock)),
            lambda: ok("spark-worker", "sudo ip link set dev %s mtu 9000" % WORKER_RAIL1),
            lambda: ok("spark-worker", "sudo systemctl stop %s || true" % LEFTOVER_UNIT),
            lambda: ok("spark-worker", "sudo cp -p %s %s && sudo rm -f %s" % (ENV_SAVED, ENV_FILE, ENV_SAVED)),
            lambda: ok("spark-head", "sudo rm -f %s" % UNFINISHED)):
        try:
            step()
        except AssertionError as exc:  # keep putting the rest back
            errors.append(str(exc))
    assert not errors, errors


def test_one_fault_per_class_fails_exactly_its_check_on_exactly_its_node(tmp_path, faults):
    # fabric: one end of rail 1 at MTU 1500 (a pair that ran at a small MTU unnoticed is a public report)
    ok("spark-worker", "sudo ip link set dev %s mtu 1500" % WORKER_RAIL1)
    # gpu: the head's SM clock lock lost (what a reboot does before the cap unit runs again)
    spark_sim("state", "spark-head", "--set", "gpu.locked_clocks=null")
    # gpu: nvidia-uvm not loaded on the worker (nvidia-smi answers; CUDA does not initialise)
    spark_sim("fault", "spark-worker", "nvidia-uvm-missing")
    # platform: an engine core left outside the serving unit (seed 003's leftovers)
    ok("spark-worker", "sudo systemd-run --quiet --collect --unit=%s bash -c 'exec -a VLLM::EngineCore sleep 900'"
       % LEFTOVER_UNIT)
    # parity: the worker's vllm.env carries a variable the head's does not (a host_vars override)
    ok("spark-worker", "echo VLLM_SLEEP_WHEN_IDLE=1 | sudo tee -a %s >/dev/null" % ENV_FILE)
    # parity (a report, WARN): the worker's ConnectX-7 on an older firmware than the head's
    spark_sim("state", "spark-worker", *["--set=hcas.%s.fw=\"%s\"" % (hca, OLD_FIRMWARE) for hca in WORKER_HCAS])
    # checkpoint: an unfinished blob of an interrupted download, as the checkpoint user leaves it
    ok("spark-head", "sudo -u dgxspark-ckpt touch %s" % UNFINISHED)
    # serving: the head's engine wedges (seed 000: the API answers, the engine does not move)
    spark_sim("fault", "spark-head", "wedge")
    runner, report, took = doctor(tmp_path, "faults", {"doctor_api_timeout": 15})
    print("doctor wall time with seven faults: quick %.1f s" % took)
    expected = {}
    expected.update({("spark-worker", "fabric-mtu"): "FAIL", ("spark-head", "gpu-clock-cap"): "FAIL",
                     ("spark-worker", "gpu-cuinit"): "FAIL",
                     ("spark-worker", "platform-leftovers"): "FAIL", ("spark-worker", "parity-vllm-env"): "FAIL",
                     ("spark-head", "checkpoint-unfinished"): "FAIL", ("spark-head", "serving-completion"): "FAIL",
                     ("spark-worker", "parity-firmware"): "WARN"})
    assert not_pass(report) == expected, [r for r in report["results"] if r["status"] != "PASS"]
    found = result(report, "spark-worker", "fabric-mtu")
    assert found["evidence"] == "%s MTU 1500, expected 9000 (peer: spark-head 9000)" % WORKER_RAIL1, found
    assert found["remedy"].startswith("Set MTU 9000 on this rail's netdev on both nodes")
    assert result(report, "spark-head", "fabric-mtu")["evidence"].endswith("%s MTU 9000 (peer: spark-worker 1500)"
                                                                           % WORKER_RAIL1)
    found = result(report, "spark-head", "gpu-clock-cap")
    assert "SM clock 2405 MHz, cap 2100 MHz (read back above the cap: the lock is lost)" in found["evidence"], found
    assert found["remedy"].startswith("Start dgxspark-clock-cap.service again")
    found = result(report, "spark-worker", "gpu-cuinit")
    assert found["evidence"] == ("cuda: RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
                                 "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. "
                                 "Setting the available devices to be zero."), found
    assert found["remedy"].startswith("CUDA does not initialise through the runtime"), found
    found = result(report, "spark-worker", "platform-leftovers")
    assert "VLLM::EngineCore" in found["evidence"], found
    assert found["remedy"].startswith("Stop the leftover processes named in the evidence")
    found = result(report, "spark-worker", "parity-vllm-env")
    assert found["evidence"].endswith(": VLLM_SLEEP_WHEN_IDLE (spark-worker 1, spark-head unset)"), found
    found = result(report, "spark-worker", "parity-firmware")
    assert found["evidence"] == "spark-worker has %s, spark-head has 28.45.4028" % OLD_FIRMWARE, found
    assert found["remedy"].endswith("the collection reports firmware and never updates it."), found
    found = result(report, "spark-head", "checkpoint-unfinished")
    assert found["evidence"] == "1 unfinished file(s): %s" % UNFINISHED, found
    found = result(report, "spark-head", "serving-completion")
    assert found["remedy"].startswith("An engine that lists the model but does not answer lost a rank"), found
    assert runner.rc != 0
    messages = siterun.failure_messages(runner)
    assert any("doctor quick: 7 check(s) failed: " in m for m in messages), messages


def test_after_doctor_site_check_mode_still_reports_no_change_and_no_failure(tmp_path):
    """site.yml --check --diff on the converged (rebooted) pair after every doctor run above: no task reports a change
    and none fails, on any host. One check-mode run proves both that doctor changed nothing and that check mode on a
    converged pair is clean (test_check_mode.py ran a second one of its own: 496 s of the gate at 07:48)."""
    runner = siterun.run_site(tmp_path, cmdline="--check --diff")
    assert runner.rc == 0, siterun.failure_messages(runner)
    assert siterun.failure_messages(runner) == []
    assert siterun.changed_tasks(runner) == [], "changed in check mode: %s" % siterun.changed_tasks(runner)
    # every play ran on both nodes (a check run that skipped the roles would prove nothing)
    recap = [ev for ev in runner.events if ev.get("event") == "playbook_on_stats"][-1]["event_data"]
    for host in siterun.HOSTS:
        assert recap["ok"].get(host, 0) > 50, recap
