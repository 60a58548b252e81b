# -*- coding: utf-8 -*-
"""The venv kind's install commands, for each form of runtime_vllm_pip_spec the README names (the seeds'
port-0271 fork branch, a wheel, ``vllm==X``), with and without a runtime_torch_spec: torch comes from the CUDA 13
index as the only index (what the chosen vLLM requires, read from pip's report of it, unless a torch pin is
given), then vLLM from its own index with a constraint pinning that torch; the torch index is never an extra
index of the vLLM install (dependency confusion, issue 24 finding 8).

The tasks are read from roles/runtime/tasks/venv.yml itself (not copied here) and their argv rendered by
ansible-playbook on localhost with the role's real defaults and vars, so a change to either shows here.
"""

from __future__ import annotations

import json
import os

import yaml

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VENV_TASKS = os.path.join(ROOT, "roles", "runtime", "tasks", "venv.yml")
PROBE_TASK = "Read the torch requirements of the vLLM to install (pip --dry-run --report, nothing installed)"
TORCH_TASK = "Install torch for CUDA 13 from runtime_torch_index_url alone (what the vLLM requires, or runtime_torch_spec)"
READ_TASK = "Read the torch the venv holds"
PIN_TASK = "Pin that torch for the vLLM install (a constraint, local version label included)"
VLLM_TASK = "Install vLLM ({{ __runtime_vllm_spec }})"
DECIDE_TASK = "Decide what the venv must hold"
VENV = "/opt/dgxspark/vllm"
PIP = VENV + "/bin/pip"
CU130 = "https://download.pytorch.org/whl/cu130"
FORK = "git+https://github.com/example/vllm.git@port-0271"
CONSTRAINTS = VENV + "/.dgxspark-torch-constraints.txt"
REPORT = json.dumps({"version": "1", "install": [{"metadata": {"name": "vllm", "version": "0.27.1+port0271",
                                                               "requires_dist": ["torch==2.9.0", "numpy"]}}]})


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
    block = [task for task in _tasks() if any(t.get("name") == VLLM_TASK for t in task.get("block", []))]
    assert len(block) == 1
    assert [t["name"] for t in block[0]["block"]][:5] == [PROBE_TASK, TORCH_TASK, READ_TASK, PIN_TASK, VLLM_TASK], names
    text = open(VENV_TASKS, encoding="utf-8").read()
    assert "--extra-index-url" not in text and "--index-url" not in text   # the argv come from pip_vllm_plan only


# (case, variables, probe argv or None, torch argv or None (task skipped), vLLM argv)
CASES = [
    ("the fork branch: its torch requirement (from pip's report), from the CUDA 13 index alone",
     {"runtime_vllm_pip_spec": FORK, "__runtime_vllm_report": {"stdout": REPORT}},
     [PIP, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", "--report", "-", FORK],
     [PIP, "install", "--index-url", CU130, "torch==2.9.0"], [PIP, "install", "--constraint", CONSTRAINTS, FORK]),
    ("the fork branch before its report (and in check mode): torch not known yet",
     {"runtime_vllm_pip_spec": FORK},
     [PIP, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", "--report", "-", FORK],
     None, [PIP, "install", "--constraint", CONSTRAINTS, FORK]),
    ("vllm==X with a torch pin: the pin, from the CUDA 13 index alone",
     {"runtime_vllm_pip_spec": "vllm==0.27.1", "runtime_torch_spec": "torch==2.11.0"},
     None, [PIP, "install", "--index-url", CU130, "torch==2.11.0"],
     [PIP, "install", "--constraint", CONSTRAINTS, "vllm==0.27.1"]),
    ("a wheel built from runtime_vllm_pip_src, with extra pip arguments (the index ones kept from the torch step)",
     {"runtime_vllm_pip_spec": "", "__runtime_wheel": "/tmp/x/vllm-0.27.1+port0271-cp312-cp312-linux_aarch64.whl",
      "runtime_vllm_pip_args": ["--cert", "/etc/ssl/corp.pem", "--extra-index-url", "https://mirror.example/simple"],
      "runtime_torch_spec": "torch==2.9.0"},
     None, [PIP, "install", "--index-url", CU130, "--cert", "/etc/ssl/corp.pem", "torch==2.9.0"],
     [PIP, "install", "--cert", "/etc/ssl/corp.pem", "--extra-index-url", "https://mirror.example/simple", "--constraint", CONSTRAINTS,
      VENV + "-dist/vllm-0.27.1+port0271-cp312-cp312-linux_aarch64.whl"]),
    ("no CUDA torch (the sim): no torch index anywhere, no constraint, a torch pin ignored",
     {"runtime_vllm_pip_spec": "vllm==0.27.1", "runtime_torch_install": False, "runtime_torch_spec": "torch==2.11.0"},
     None, None, [PIP, "install", "vllm==0.27.1"]),
]


def _when(task):
    """The task's condition as a template (a bare ``when:`` string is not templated as a variable)."""
    when = task.get("when", "true")
    when = when if isinstance(when, list) else [when]
    return "{{ (%s) }}" % ") and (".join(when)


def test_the_install_commands_for_every_spec_form(tmp_path):
    tasks = _by_name()
    probe, torch, vllm, decide = tasks[PROBE_TASK], tasks[TORCH_TASK], tasks[VLLM_TASK], tasks[DECIDE_TASK]
    spec_template = decide["ansible.builtin.set_fact"]["__runtime_vllm_spec"]
    checks = []
    for name, variables, probe_argv, torch_argv, vllm_argv in CASES:
        rendered = {"__case_spec": spec_template}
        checks.append({"name": name, "vars": dict(variables, **rendered), "ansible.builtin.set_fact": {
            "__runtime_vllm_spec": "{{ __case_spec }}"}})
        case = dict(variables, __case_probe=probe["ansible.builtin.command"]["argv"], __case_probe_runs=_when(probe),
                    __case_torch=torch["ansible.builtin.command"]["argv"], __case_torch_runs=_when(torch),
                    __case_vllm=vllm["ansible.builtin.command"]["argv"], __case_env=torch["environment"])
        env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""}
        that = ["(__case_probe_runs | bool) == %s" % (probe_argv is not None),
                "(__case_torch_runs | bool) == %s" % (torch_argv is not None),
                "__case_vllm == %s" % json.dumps(vllm_argv)]
        if probe_argv:
            that.append("__case_probe == %s" % json.dumps(probe_argv))
        if torch_argv:
            that += ["__case_torch == %s" % json.dumps(torch_argv), "__case_env == %s" % json.dumps(env)]
        checks.append({"name": name + " (argv)", "vars": case, "ansible.builtin.assert": {
            "quiet": True, "that": that,
            "fail_msg": "%s: probe {{ __case_probe }} (runs {{ __case_probe_runs }}), torch {{ __case_torch }} "
                        "(runs {{ __case_torch_runs }}), vllm {{ __case_vllm }}" % name}})
    roleplay.run_role_tasks(tmp_path, "runtime", checks, play_vars={"__runtime_wheel": "/unused.whl", "ansible_check_mode": False})
