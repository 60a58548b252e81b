"""uninstall.yml on the converged pair, after every other test of the scenario (conftest.py orders it last).

prepare.yml took a snapshot of each node before the first site.yml (node_snapshot.sh: files outside /proc, /sys,
/run, /dev and the volatile places, the content of /etc, /usr/local and /opt, unit files and states, packages with
versions and holds, users and groups). Here:

1. uninstall.yml --check lists what would go and what stays, and changes nothing (a snapshot before and after);
2. uninstall.yml -e uninstall_packages=true -e uninstall_checkpoint=true, then the snapshot again: nothing the
   collection added is left and nothing the node had is gone, except the differences ALLOWED lists, each with why;
3. a second uninstall.yml finds nothing recorded and changes nothing.
"""

import os
import re
import subprocess

import pytest

import siterun

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_snapshot.sh")
SNAPSHOT = "/var/tmp/dgxspark-uninstall.%s"

# Differences between the node before the first site.yml and after uninstall.yml that are not the collection's
# leftovers, each with why.
ALLOWED = (
    (r"^(file|content) /etc/(passwd|group|shadow|gshadow|subuid|subgid)- ",
     "shadow-utils' backup of the previous passwd/group/shadow, rewritten by every useradd and userdel"),
    (r"^(file|content) /etc/(hosts|hostname|resolv\.conf) ",
     "docker's own files in the node container: bind mounts it regenerates at every start of the container (the "
     "default scenario reboots the nodes), listing the container's address on each network in an order of its own; "
     "no role writes them (gate 07:48: the head's /etc/hosts differed, the worker's did not)"),
    (r"^file /root/\.ansible_async ",
     "ansible-core's own directory of async job results (async tasks of any playbook), like ~/.ansible"),
    (r"^content /etc/ld\.so\.cache ",
     "ldconfig's cache, rebuilt by the package triggers of every install and purge (its order may differ)"),
    (r"^file (/var/backups/apt\.extended_states\.[0-9]+(\.gz)?|/var/lib/apt/daily_lock) ",
     "apt's own daily job (apt-daily.timer, /usr/lib/apt/apt.systemd.daily: its lock and its backup of "
     "extended_states), which fires at a random time of day (gate 17:35 saw it during this scenario); no role "
     "writes them"),
    (r"^file /var/backups/(dpkg\.(status|diversions|statoverride|arch)|alternatives\.tar)\.[0-9]+(\.gz)? ",
     "dpkg's own daily backup (dpkg-db-backup.timer, OnCalendar=daily: at midnight, /usr/libexec/dpkg/dpkg-db-backup "
     "rotating them with savelog); the gate of 2026-12-07 23:55 ran this scenario across midnight; no role writes them"),
    (r"^(file|content) (/etc/apt/sources\.list\.d/nvidia-sim\.sources|/etc/apt/apt\.conf\.d/52spark-sim-unattended-upgrades"
     r"|/var/lib/apt/periodic/unattended-upgrades-stamp) ",
     "the test's own archive move (side_effect.yml, issue 25): it points the sim's repository at the advanced archive, "
     "lets unattended-upgrades take the sim's origins and runs it (its stamp); no role writes them"),
)


def take(host, name):
    """The node's snapshot as a set of lines (and written to SNAPSHOT % name on the node)."""
    with open(SCRIPT, "rb") as script:
        proc = subprocess.run(["ssh", "-F", os.path.join(siterun.SIM_DIR, "ssh_config"), host,
                               "sudo sh -s %s && sudo cat %s" % (SNAPSHOT % name, SNAPSHOT % name)],
                              stdin=script, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return set(proc.stdout.decode(errors="replace").splitlines())


def before(host):
    proc = siterun.ssh(host, "sudo cat %s" % (SNAPSHOT % "before"))
    assert proc.returncode == 0, "%s: no snapshot from before the first site.yml (prepare.yml takes it): %s" % (
        host, proc.stderr)
    lines = set(proc.stdout.splitlines())
    assert len(lines) > 1000, "%s: the snapshot before site.yml is too small to mean anything" % host
    return lines


def unexplained(was, now):
    """The differences (- line: gone, + line: added) that no ALLOWED pattern explains."""
    out = []
    for sign, lines in (("-", sorted(was - now)), ("+", sorted(now - was))):
        for line in lines:
            if not any(re.search(pattern, line) for pattern, _why in ALLOWED):
                out.append(sign + " " + line)
    return out


def report_lines(runner):
    out = []
    for ev in runner.events:
        if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task") == "Report what went, what stays and why":
            out.extend(ev["event_data"]["res"].get("msg") or [])
    return out


@pytest.fixture(scope="module")
def uninstalled(tmp_path_factory):
    """check mode (with snapshots around it), the uninstall, the snapshots after it, a second uninstall."""
    root = tmp_path_factory.mktemp("uninstall")
    out = {"before": {host: before(host) for host in siterun.HOSTS}}
    out["pre_check"] = {host: take(host, "pre-check") for host in siterun.HOSTS}
    out["check"] = siterun.run_site(root / "check", playbook="uninstall.yml", cmdline="--check")
    out["post_check"] = {host: take(host, "post-check") for host in siterun.HOSTS}
    out["run"] = siterun.run_site(root / "run", playbook="uninstall.yml",
                                  extravars={"uninstall_packages": True, "uninstall_checkpoint": True})
    out["after"] = {host: take(host, "after") for host in siterun.HOSTS}
    out["again"] = siterun.run_site(root / "again", playbook="uninstall.yml",
                                    extravars={"uninstall_packages": True, "uninstall_checkpoint": True})
    return out


def test_check_mode_lists_what_would_go_and_changes_nothing(uninstalled):
    runner = uninstalled["check"]
    assert runner.rc == 0, siterun.failure_messages(runner)
    lines = report_lines(runner)
    for host in siterun.HOSTS:
        mine = [line for line in lines if line.startswith(host + ": ")]
        assert any(" would remove: " in line and "/etc/systemd/system/dgxspark-vllm.service" in line for line in mine), mine
        assert any(" would restore: earlyoom.service to enabled" in line for line in mine), mine
        assert any(" kept package cuda-toolkit-13-3 " in line for line in mine), mine    # uninstall_packages false
        changed = unexplained(uninstalled["pre_check"][host], uninstalled["post_check"][host])
        assert changed == [], "%s: check mode changed the node: %s" % (host, changed[:40])
    assert any(line.startswith("spark-head: kept ") and "holds the checkpoint" in line for line in lines), lines


def test_uninstall_leaves_each_node_as_it_was_before_site(uninstalled):
    runner = uninstalled["run"]
    assert runner.rc == 0, siterun.failure_messages(runner)
    problems = {}
    for host in siterun.HOSTS:
        diff = unexplained(uninstalled["before"][host], uninstalled["after"][host])
        if diff:
            problems[host] = diff[:60] + (["... %d more" % (len(diff) - 60)] if len(diff) > 60 else [])
    assert problems == {}, "\n".join("%s:\n  %s" % (h, "\n  ".join(d)) for h, d in problems.items())


def test_the_head_stopped_first(uninstalled):
    order = [ev["event_data"].get("host") for ev in uninstalled["run"].events
             if ev.get("event") == "runner_on_ok"
             and ev["event_data"].get("task") == "Remove what the collection installed on this node (check mode lists it)"]
    assert order == ["spark-head", "spark-worker"], order


def test_a_second_uninstall_finds_nothing_and_changes_nothing(uninstalled):
    runner = uninstalled["again"]
    assert runner.rc == 0, siterun.failure_messages(runner)
    assert siterun.changed_tasks(runner) == []
    lines = report_lines(runner)
    assert sorted(lines) == ["%s: no baseline in /var/lib/dgxspark/converged: nothing the collection installed is "
                             "recorded on this node" % h for h in siterun.HOSTS], lines
