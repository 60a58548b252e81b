"""Helpers for the tests that drive site.yml through ansible-runner against the
default scenario's sim pair (imported by the test_*.py files beside it)."""

import os
import shutil
import subprocess
import sys

import ansible_runner

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
INVENTORY = os.path.join(SCENARIO, "inventory")
SIM_DIR = os.environ.get("SPARK_SIM_DIR") or os.path.join(PROJECT, ".sim", "molecule-default")
SIM_NAME = "molecule-default"
HOSTS = ("spark-head", "spark-worker")


def envvars():
    return {
        "ANSIBLE_CONFIG": os.path.join(PROJECT, "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(PROJECT, "collections"),
        "SPARK_SIM_DIR": SIM_DIR,
        "ANSIBLE_NOCOLOR": "1",
    }


def copy_inventory(dest):
    """The scenario inventory, symlinks resolved, so a case can edit any file."""
    shutil.copytree(INVENTORY, dest, symlinks=False)
    return dest


def run_site(tmp_path, inventory=INVENTORY, extravars=None, cmdline=None, event_handler=None, playbook="site.yml"):
    """site.yml (or another of the collection's playbooks) through ansible-runner; returns the runner (rc, events, stdout)."""
    private = tmp_path / "runner"
    private.mkdir(parents=True, exist_ok=True)
    kwargs = {}
    if cmdline:
        kwargs["cmdline"] = cmdline
    if event_handler:
        kwargs["event_handler"] = event_handler
    return Finished(ansible_runner.run(
        private_data_dir=str(private),
        playbook=os.path.join(PROJECT, playbook),
        inventory=str(inventory),
        envvars=envvars(),
        extravars=extravars or {},
        quiet=True,
        timeout=1800,
        **kwargs
    ))


class Finished:
    """A finished ansible-runner run whose events are read once: Runner.events reads every event file of the
    artifacts directory again at each access, and a test reads them 3 to 5 times (~3,000 events for a full run)."""

    def __init__(self, runner):
        self._runner = runner
        self.events = list(runner.events)

    def __getattr__(self, name):
        return getattr(self._runner, name)


def changed_tasks(runner):
    """'host: task' of every task that reported changed."""
    return ["%s: %s" % (ev["event_data"].get("host"), ev["event_data"].get("task"))
            for ev in runner.events
            if ev.get("event") == "runner_on_ok" and ev["event_data"].get("res", {}).get("changed")]


def failure_messages(runner):
    """'host: msg' of every failed or unreachable task."""
    out = []
    for ev in runner.events:
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            res = ev["event_data"].get("res", {})
            out.append("%s: %s" % (ev["event_data"].get("host"), res.get("msg", res)))
    return out


def ssh(host, command):
    """A command on a sim node over the controller's pinned ssh config."""
    return subprocess.run(["ssh", "-F", os.path.join(SIM_DIR, "ssh_config"), host, command],
                          capture_output=True, text=True, timeout=120, check=False)


def spark_sim(*args):
    """sim/spark-sim on the scenario inventory (state, fault, ...); fails the test when it fails."""
    env = dict(os.environ, **envvars())
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([os.path.join(PROJECT, "sim", "spark-sim"), "-i", INVENTORY, *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def container(host):
    """The docker container of a sim node (spark-sim names them <sim>-<host>)."""
    return "%s-%s" % (SIM_NAME, host)


FAST_PATH_REPORT = "Report the fast path, or what drifted"


def fast_path_reports(runner):
    """{host: the preflight's fast-path report} ('... nothing drifted ...' or '... full run: <what drifted>')."""
    return {ev["event_data"].get("host"): ev["event_data"]["res"].get("msg", "")
            for ev in runner.events
            if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task") == FAST_PATH_REPORT}


def ok_counts(runner):
    """{host: number of tasks that ran (ok or changed, not skipped)}."""
    counts = {}
    for ev in runner.events:
        if ev.get("event") == "runner_on_ok":
            host = ev["event_data"].get("host")
            counts[host] = counts.get(host, 0) + 1
    return counts
