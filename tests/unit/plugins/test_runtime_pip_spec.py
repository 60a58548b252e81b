# -*- coding: utf-8 -*-
"""The venv kind's install commands, for each form of runtime_vllm_pip_spec the README names (the seeds'
port-0271 fork branch, a wheel, ``vllm==X``), with and without a runtime_torch_spec: torch is what the
chosen vLLM requires, from the CUDA 13 index as an extra index, unless a torch pin is given, which is then
installed first from that index as the only one.

The argv templates are read from roles/runtime/tasks/venv.yml itself (not copied here) and rendered by
ansible-playbook on localhost with the role's real defaults and vars, so a change to either task shows here.
"""

from __future__ import annotations

import json
import os

import yaml

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VENV_TASKS = os.path.join(ROOT, "roles", "runtime", "tasks", "venv.yml")
TORCH_TASK = "Install the pinned torch for CUDA 13 first (runtime_torch_spec set)"
VLLM_TASK = "Install vLLM ({{ __runtime_vllm_spec }})"
DECIDE_TASK = "Decide what the venv must hold"
VENV = "/opt/dgxspark/vllm"
PIP = VENV + "/bin/pip"
CU130 = "https://download.pytorch.org/whl/cu130"
FORK = "git+https://github.com/example/vllm.git@port-0271"


def _tasks():
    """{name: task} of venv.yml, blocks flattened, in file order."""
    out = []

    def walk(items):
        for item in items:
            out.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key, []))
    with open(VENV_TASKS, encoding="utf-8") as handle:
        walk(yaml.safe_load(handle))
    return out


def _by_name():
    return {task.get("name"): task for task in _tasks()}


def test_torch_is_installed_before_vllm_in_the_same_block():
    names = [task.get("name") for task in _tasks()]
    assert TORCH_TASK in names and VLLM_TASK in names, names
    assert names.index(TORCH_TASK) < names.index(VLLM_TASK)
    block = [task for task in _tasks() if any(t.get("name") == VLLM_TASK for t in task.get("block", []))]
    assert len(block) == 1 and [t["name"] for t in block[0]["block"]][:2] == [TORCH_TASK, VLLM_TASK]


# (case, variables, torch argv or None when the torch task does not run, vLLM argv)
CASES = [
    ("the fork branch, torch from the CUDA 13 extra index", {"runtime_vllm_pip_spec": FORK},
     None, [PIP, "install", "--extra-index-url", CU130, FORK]),
    ("vllm==X with a torch pin: the pin first, from the CUDA 13 index only",
     {"runtime_vllm_pip_spec": "vllm==0.27.1", "runtime_torch_spec": "torch==2.11.0"},
     [PIP, "install", "--index-url", CU130, "torch==2.11.0"], [PIP, "install", "vllm==0.27.1"]),
    ("a wheel built from runtime_vllm_pip_src, with extra pip arguments",
     {"runtime_vllm_pip_spec": "", "__runtime_wheel": "/tmp/x/vllm-0.27.1+port0271-cp312-cp312-linux_aarch64.whl",
      "runtime_vllm_pip_args": ["--cert", "/etc/ssl/corp.pem"]},
     None, [PIP, "install", "--cert", "/etc/ssl/corp.pem", "--extra-index-url", CU130,
            VENV + "-dist/vllm-0.27.1+port0271-cp312-cp312-linux_aarch64.whl"]),
    ("no CUDA torch (the sim): no torch index anywhere, a torch pin ignored",
     {"runtime_vllm_pip_spec": "vllm==0.27.1", "runtime_torch_install": False, "runtime_torch_spec": "torch==2.11.0"},
     None, [PIP, "install", "vllm==0.27.1"]),
]


def _when(task):
    """The task's condition as a template (a bare ``when:`` string is not templated as a variable)."""
    when = task["when"] if isinstance(task["when"], list) else [task["when"]]
    return "{{ (%s) }}" % ") and (".join(when)


def test_the_install_commands_for_every_spec_form(tmp_path):
    tasks = _by_name()
    torch, vllm, decide = tasks[TORCH_TASK], tasks[VLLM_TASK], tasks[DECIDE_TASK]
    spec_template = decide["ansible.builtin.set_fact"]["__runtime_vllm_spec"]
    checks = []
    for name, variables, torch_argv, vllm_argv in CASES:
        rendered = {"__case_spec": spec_template}
        checks.append({"name": name, "vars": dict(variables, **rendered), "ansible.builtin.set_fact": {
            "__runtime_vllm_spec": "{{ __case_spec }}"}})
        checks.append({"name": name + " (argv)", "vars": dict(variables, __case_torch=torch["ansible.builtin.command"]["argv"],
                                                              __case_vllm=vllm["ansible.builtin.command"]["argv"],
                                                              __case_torch_runs=_when(torch)),
                       "ansible.builtin.assert": {"quiet": True, "that": [
                           "(__case_torch_runs | bool) == %s" % (torch_argv is not None),
                           "__case_vllm == %s" % json.dumps(vllm_argv),
                       ] + (["__case_torch == %s" % json.dumps(torch_argv)] if torch_argv else []),
                           "fail_msg": "%s: torch {{ __case_torch }} (runs {{ __case_torch_runs }}), vllm {{ __case_vllm }}" % name}})
    roleplay.run_role_tasks(tmp_path, "runtime", checks, play_vars={"__runtime_wheel": "/unused.whl"})
