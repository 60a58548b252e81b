"""A clock cap that fails at boot, driven from the controller once the live-state tests
(test_clock_cap.py) have passed: the scenario's converge.yml through ansible-runner
(preflight with the fast path, clock_cap, the service role's cap requirement on the
stand-in serving unit) and the sim's `fault` and `reboot` commands.

1. A complete run with `preflight_fast_path: false` changes nothing and records stamps.
2. `spark-sim fault spark-worker lgc-fails`, then a real reboot of the worker: its cap unit
   retries, gives up and fails; the serving unit stays stopped, and its journal names the
   cap unit and nvidia-smi's error; the GPU is uncapped and serves nothing.
3. The next run names the real drift (the cap unit failed), not "the inputs changed" after
   the run with the fast path off, and stops at the cap with the cap's error.
4. `spark-sim fault spark-worker clear`: the next run starts the cap and the serving unit,
   capped; the run after it takes the fast path.

The runs pass preflight_fast_path_roles [clock_cap] (this scenario has no other role's
stamps); like preflight_fast_path it only chooses the path and is no input of the digest.
"""

import os
import subprocess
import sys
import time

import ansible_runner

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
INVENTORY = os.path.join(SCENARIO, "inventory")
SIM_DIR = os.environ.get("SPARK_SIM_DIR") or os.path.join(PROJECT, ".sim", "molecule-clock_cap")
FAST = {"preflight_fast_path_roles": ["clock_cap"]}
REPORT = "Report the fast path, or what drifted"
CAP, SERVING, WORKER = "dgxspark-clock-cap.service", "dgxspark-vllm.service", "spark-worker"


def run(tmp_path, extravars):
    private = tmp_path / "runner"
    private.mkdir(parents=True, exist_ok=True)
    return ansible_runner.run(
        private_data_dir=str(private), playbook=os.path.join(SCENARIO, "converge.yml"), inventory=INVENTORY,
        envvars={"ANSIBLE_CONFIG": os.path.join(PROJECT, "ansible.cfg"), "SPARK_SIM_DIR": SIM_DIR,
                 "ANSIBLE_COLLECTIONS_PATH": os.path.join(PROJECT, "collections"), "ANSIBLE_NOCOLOR": "1"},
        extravars=extravars, quiet=True, timeout=900)


def _events(runner, *kinds):
    return [ev["event_data"] for ev in runner.events if ev.get("event") in kinds]


def changed_tasks(runner):
    return ["%s: %s" % (ev.get("host"), ev.get("task")) for ev in _events(runner, "runner_on_ok")
            if ev.get("res", {}).get("changed")]


def failures(runner):
    return ["%s: %s" % (ev.get("host"), ev.get("res", {}).get("msg", ev.get("res")))
            for ev in _events(runner, "runner_on_failed", "runner_on_unreachable")]


def reports(runner):
    return {ev.get("host"): ev["res"].get("msg", "") for ev in _events(runner, "runner_on_ok") if ev.get("task") == REPORT}


def ok_hosts(runner):
    return sorted({ev.get("host") for ev in _events(runner, "runner_on_ok")})


def sim(*args):
    proc = subprocess.run([sys.executable, os.path.join(PROJECT, "sim", "spark-sim"), "-i", INVENTORY, *args],
                          capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ, SPARK_SIM_DIR=SIM_DIR))
    assert proc.returncode == 0, proc.stderr
    return proc


def ssh(host, command):
    proc = subprocess.run(["ssh", "-F", os.path.join(SIM_DIR, "ssh_config"), host, command],
                          capture_output=True, text=True, timeout=120, check=False)
    return proc.stdout.strip()


def test_a_cap_that_fails_at_boot_leaves_serving_stopped_and_the_next_run_repairs_it(tmp_path):
    # 1. a complete run with the fast path off: no change, stamps recorded
    off = run(tmp_path / "off", dict(FAST, preflight_fast_path=False))
    assert off.rc == 0, failures(off)
    assert changed_tasks(off) == [] and ok_hosts(off) == ["spark-head", WORKER]
    assert sorted(reports(off)) == ["spark-head", WORKER] and all("fast path off" in m for m in reports(off).values())

    # 2. -lgc fails from the next boot on
    sim("fault", WORKER, "lgc-fails")
    sim("reboot", WORKER)
    deadline = time.time() + 90
    while ssh(WORKER, "systemctl is-active %s" % CAP) != "failed" and time.time() < deadline:
        time.sleep(2)  # 3 attempts, 5 s apart
    assert ssh(WORKER, "systemctl is-active %s" % CAP) == "failed"
    assert ssh(WORKER, "systemctl is-active %s" % SERVING) in ("failed", "inactive")
    serving_journal = ssh(WORKER, "sudo journalctl -b -u %s --no-pager -o cat" % SERVING)
    assert "%s is failed" % CAP in serving_journal, serving_journal
    assert "Unable to set locked GPU clocks for GPU 0000000F:01:00.0: Unknown Error" in serving_journal, serving_journal
    cap_journal = ssh(WORKER, "sudo journalctl -b -u %s --no-pager -o cat" % CAP)
    assert "attempt 3 of 3 failed" in cap_journal and "the GPU is NOT capped" in cap_journal, cap_journal
    assert ssh(WORKER, "nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits") == "2405"

    # 3. the next run names the real drift, reports the cap's error and stops there
    failed = run(tmp_path / "failed", FAST)
    assert failed.rc != 0
    found = reports(failed)
    assert "clock_cap: unit:%s: was enabled active, now enabled failed" % CAP in found[WORKER], found
    assert "inputs changed" not in " ".join(found.values()), found
    assert "another node drifted" in found["spark-head"], found
    messages = " | ".join(failures(failed))
    assert messages.startswith(WORKER + ": ") and "%s failed to start" % CAP in messages, messages
    assert "Unknown Error" in messages and "after 3 attempts" in messages, messages
    told = [ev["res"].get("msg", "") for ev in _events(failed, "runner_on_ok")
            if ev.get("host") == WORKER and ev.get("task", "").startswith("Report a cap that failed")]
    assert told and "%s is failed (result exit-code)" % CAP in told[0], told

    # 4. fault cleared: the next run starts the cap, then the serving unit, capped
    sim("fault", WORKER, "clear")
    repair = run(tmp_path / "repair", FAST)
    assert repair.rc == 0, failures(repair)
    changed = changed_tasks(repair)
    assert "%s: Enable the unit at boot and start it" % WORKER in changed, changed
    assert "%s: Start the serving unit, as the service role does" % WORKER in changed, changed
    assert all(line.startswith(WORKER + ": ") for line in changed), changed
    assert ssh(WORKER, "nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits") == "2080"
    assert ssh(WORKER, "systemctl is-active %s %s" % (CAP, SERVING)).split() == ["active", "active"]
    again = run(tmp_path / "again", FAST)
    assert again.rc == 0 and changed_tasks(again) == [], changed_tasks(again)
    assert all("nothing drifted on any node" in m for m in reports(again).values()) and len(reports(again)) == 2
