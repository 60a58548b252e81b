"""upgrade.yml on the service scenario's serving pair (issue 25), after test_service.py and before test_watchdog.py.

The pair runs the stock set: kernel 6.17.0-1014-nvidia, NVIDIA driver 580.173.02 and its precompiled module build.
The sim's archive offers the flavour's newer kernel 6.17.0-1026-nvidia and 580.178.04 with builds for both kernels.

1. the dry run (--check) lists what would move on each node and changes nothing (every package, hold and pin, the
   boot, the serving units);
2. without driver_reboot_ok the run stops before any change, naming the variable;
3. with the worker's new kernel breaking RDMA memory registration (sim fault kernel-update-kho: the KHO build
   options of NV-Kernels #590 in 6.17.0-1026), the worker - the first to move - fails its RDMA check after the
   reboot, is put back on 6.17.0-1014 with 580.173.02 (every package at its old version), the head is never touched
   (same packages, same boot), the pair serves again and the run names the node, the check and kho=off;
4. with the fault cleared both nodes move, the worker first (its reboot ends before the head's install starts),
   both run 6.17.0-1026-nvidia with 580.178.04 loaded, held and pinned, the pair serves, validate.yml's quick guards
   pass in the same run; a second run moves nothing and changes nothing.

The tests run in file order and share the pair; none takes the `host` fixture (each runs once).
"""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair import HEAD, PROJECT, UNIT, WORKER, changed, failures, ok_msgs, out, run, spark_sim  # noqa: E402 pylint: disable=wrong-import-position

UPGRADE = os.path.join(PROJECT, "upgrade.yml")
OLD, NEW = ("6.17.0-1014-nvidia", "580.173.02"), ("6.17.0-1026-nvidia", "580.178.04")
PROC = "/var/lib/spark-sim/proc"    # the sim's stand-in /proc (inventory: driver_proc_root)
CHECK = "/usr/local/lib/dgxspark/dgxspark_vllm_check.py"
PACKAGES = ("dpkg-query -W -f='${Package} ${db:Status-Abbrev}${Version}\\n' 'nvidia-*' 'libnvidia-*' 'linux-*' "
            "| grep -v ' un'")
REPORT = "Report what moves on each node"


def node_state(host):
    """Every driver and kernel package with its status and version, the apt pins, the boot, the serving unit."""
    return {
        "packages": out(host, PACKAGES),
        "pins": out(host, "cat /etc/apt/preferences.d/dgxspark-* 2>/dev/null || true"),
        "boot": out(host, "cat /run/spark-sim/boot_id"),
        "kernel": out(host, "cat %s/sys/kernel/osrelease" % PROC).strip(),
        "versions": "\n".join(" ".join(line.split()[::2]) for line in out(host, PACKAGES).splitlines()),
        "loaded": re.search(r"Kernel Module(?: for \S+)?\s+(\S+)", out(host, "cat %s/driver/nvidia/version" % PROC)).group(1),
        "unit": out(host, "systemctl show -p ActiveState --value %s" % UNIT).strip(),
    }


def _without_pinning(versions):
    return "\n".join(line for line in versions.splitlines() if not line.startswith("nvidia-driver-pinning-"))


def serves():
    vars_file = "/etc/dgxspark/vllm-secret.env"
    proc_out = out(HEAD, "python3 %s --url http://127.0.0.1:8888 --served-model-name deepseek-v4-flash-0731 "
                         "--secret-env-file %s --completion-timeout 30 && echo SERVES" % (CHECK, vars_file))
    return proc_out.strip().endswith("SERVES")


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory):
    return tmp_path_factory.mktemp("upgrade")


@pytest.fixture(scope="module")
def before():
    state = {host: node_state(host) for host in (HEAD, WORKER)}
    for host in (HEAD, WORKER):
        assert (state[host]["kernel"], state[host]["loaded"]) == OLD, state[host]
        assert state[host]["unit"] == "active"
    return state


def test_the_dry_run_lists_what_moves_and_changes_nothing(tmp_module, before):
    runner = run(tmp_module, UPGRADE, {"driver_reboot_ok": True}, cmdline="--check")
    assert runner.rc == 0, failures(runner)
    assert changed(runner) == []
    report = ok_msgs(runner, REPORT)
    for host in (HEAD, WORKER):
        msg = " ".join(report[host].split())
        assert "kernel %s -> %s, NVIDIA driver %s -> %s" % (OLD[0], NEW[0], OLD[1], NEW[1]) in msg, msg
        assert "linux-image-%s 6.17.0-1026.26 (new)" % NEW[0] in msg, msg
        assert "nvidia-utils-580 580.173.02-1ubuntu1 -> 580.178.04-1ubuntu1" in msg, msg
        assert msg.endswith("This is a dry run (check mode): nothing moved."), msg
        assert node_state(host) == before[host]


def test_without_driver_reboot_ok_it_stops_before_any_change(tmp_module, before):
    runner = run(tmp_module, UPGRADE)
    assert runner.rc != 0
    msg = " ".join(" ".join(str(m) for m in failures(runner)).split())
    assert "nothing was changed on any node" in msg and "set driver_reboot_ok: true" in msg, msg
    assert changed(runner) == []
    for host in (HEAD, WORKER):
        assert node_state(host) == before[host]


def test_a_node_that_fails_its_check_is_put_back_and_the_other_is_untouched(tmp_module, before):
    spark_sim("fault", WORKER, "kernel-update-kho")
    try:
        runner = run(tmp_module, UPGRADE, {"driver_reboot_ok": True})
    finally:
        spark_sim("fault", WORKER, "clear")
    assert runner.rc != 0
    msg = " ".join(" ".join(str(m) for m in failures(runner)).split())
    assert "spark-worker failed the check 'rdma' while moving to kernel %s -> %s" % (OLD[0], NEW[0]) in msg, msg
    assert "ENOMEM" in msg and "kho=off" in msg, msg
    assert "spark-worker is back on kernel %s with NVIDIA driver %s, every package at the version it had" % OLD in msg, msg
    assert "Not moved: spark-head." in msg, msg
    worker, head = node_state(WORKER), node_state(HEAD)
    assert (worker["kernel"], worker["loaded"]) == OLD
    # every package at its old version, held and pinned now (the driver role's pass); NVIDIA's pinning package is the
    # driver role's own and new on this pair, which no role of this scenario ran the driver role on before
    assert _without_pinning(worker["versions"]) == _without_pinning(before[WORKER]["versions"])
    assert worker["boot"] != before[WORKER]["boot"]                  # it rebooted twice: into the new set and back
    installs = [ev["event_data"]["host"] for ev in runner.events if ev.get("event") == "runner_on_ok"
                and ev["event_data"].get("task", "").startswith("Install the new set")]
    assert installs == [WORKER]
    assert head["packages"] == before[HEAD]["packages"] and head["pins"] == before[HEAD]["pins"]
    assert head["boot"] == before[HEAD]["boot"]
    assert head["unit"] == worker["unit"] == "active"
    assert serves()


def test_both_nodes_move_one_at_a_time_and_the_guards_pass(tmp_module, before):
    runner = run(tmp_module, UPGRADE, {"driver_reboot_ok": True})
    assert runner.rc == 0, failures(runner)
    steps = [(ev["event_data"]["host"], ev["event_data"]["task"]) for ev in runner.events
             if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task", "").startswith(
                 ("Install the new set", "Reboot the node and wait for it"))]
    assert [(h, t.split(" (")[0]) for h, t in steps] == [
        (WORKER, "Install the new set"), (WORKER, "Reboot the node and wait for it"),
        (HEAD, "Install the new set"), (HEAD, "Reboot the node and wait for it")], steps
    for host in (HEAD, WORKER):
        state = node_state(host)
        assert (state["kernel"], state["loaded"]) == NEW, state
        assert "nvidia-utils-580 hi 580.178.04-1ubuntu1" in state["packages"], state["packages"]
        assert "linux-image-%s hi 6.17.0-1026.26" % NEW[0] in state["packages"], state["packages"]
        assert "Pin: version 580.178.04" in state["pins"], state["pins"]
        assert state["unit"] == "active"
    guards = ok_msgs(runner, "Report each guard's verdict")[HEAD]
    assert guards and all(line.startswith("PASS") for line in guards), guards
    assert serves()
    again = run(tmp_module, UPGRADE, {"driver_reboot_ok": True})
    assert again.rc == 0, failures(again)
    assert changed(again) == [], changed(again)
    assert all("nothing newer to move to" in msg for msg in ok_msgs(again, REPORT).values())
