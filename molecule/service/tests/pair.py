"""What the service scenario's verify files share: commands on the pair, the sim's CLI and playbook runs."""

import os
import shutil
import subprocess
import sys
import time
import types

import ansible_runner

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
INVENTORY = os.path.join(SCENARIO, "inventory")
SIM_DIR = os.environ.get("SPARK_SIM_DIR") or os.path.join(PROJECT, ".sim", "molecule-service")
HEAD, WORKER = "spark-head", "spark-worker"
UNIT = "dgxspark-vllm.service"


def ssh(host, command, timeout=180):
    return subprocess.run(["ssh", "-F", os.path.join(SIM_DIR, "ssh_config"), host, command],
                          capture_output=True, text=True, timeout=timeout, check=False)


def root(host, command, timeout=180):
    proc = ssh(host, "sudo -n sh -c %s" % _quote(command), timeout=timeout)
    return proc


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def out(host, command):
    proc = root(host, command)
    assert proc.returncode == 0, "%s: %s failed: %s" % (host, command, proc.stderr)
    return proc.stdout


def spark_sim(*args):
    env = dict(os.environ, SPARK_SIM_DIR=SIM_DIR)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([os.path.join(PROJECT, "sim", "spark-sim"), "-i", INVENTORY, *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def run(tmp_path, playbook, extravars=None, cmdline=None):
    private = tmp_path / ("runner-%s-%d" % (os.path.basename(playbook), time.monotonic_ns()))
    private.mkdir(parents=True)
    envvars = {"ANSIBLE_CONFIG": os.path.join(PROJECT, "ansible.cfg"),
               "ANSIBLE_COLLECTIONS_PATH": os.path.join(PROJECT, "collections"),
               "SPARK_SIM_DIR": SIM_DIR, "ANSIBLE_NOCOLOR": "1"}
    runner = ansible_runner.run(private_data_dir=str(private), playbook=playbook, inventory=INVENTORY, envvars=envvars,
                                extravars=extravars or {}, cmdline=cmdline, quiet=True, timeout=1200)
    # the events are read from the artifacts directory: keep them before it goes
    result = types.SimpleNamespace(rc=runner.rc, events=list(runner.events))
    shutil.rmtree(private / "artifacts", ignore_errors=True)
    return result


def changed(runner):
    return ["%s: %s" % (ev["event_data"].get("host"), ev["event_data"].get("task")) for ev in runner.events
            if ev.get("event") == "runner_on_ok" and ev["event_data"].get("res", {}).get("changed")]


def ok_msgs(runner, task):
    return {ev["event_data"].get("host"): ev["event_data"]["res"].get("msg", "") for ev in runner.events
            if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task") == task}


def failures(runner):
    return [ev["event_data"].get("res", {}).get("msg") for ev in runner.events
            if ev.get("event") in ("runner_on_failed", "runner_on_unreachable")]
