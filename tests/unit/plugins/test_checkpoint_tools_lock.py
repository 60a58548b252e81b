# -*- coding: utf-8 -*-
"""The checkpoint role's tools venv and its hash-locked requirements, rendered by ansible-playbook with the role's
real defaults and vars: the pins the role reads from files/hf-tools-requirements.txt, the probe that reads what the
venv holds of them (run for real, against this test's own Python), and validate's stop when
checkpoint_huggingface_hub_version is not the locked version."""

from __future__ import annotations

import json
import os
import sys

import yaml

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.dgxspark.cluster.plugins.module_utils import pip_plan  # noqa: E402

LOCK = os.path.join(ROOT, "roles", "checkpoint", "files", "hf-tools-requirements.txt")


def _problems_template():
    with open(os.path.join(ROOT, "roles", "checkpoint", "tasks", "validate.yml"), encoding="utf-8") as handle:
        block = yaml.safe_load(handle)[0]["block"]
    task = next(t for t in block if t["name"] == "Check the pin and the groups")
    return {"__p": task["vars"]["__checkpoint_problems"], "__checkpoint_head_count": task["vars"]["__checkpoint_head_count"]}


def test_the_pins_the_probe_and_the_version_check(tmp_path):
    with open(LOCK, encoding="utf-8") as handle:
        pins = pip_plan.lock_pins(handle.read())
    venv = os.path.dirname(os.path.dirname(sys.executable))
    problems = _problems_template()
    tasks = [
        {"name": "pins", "ansible.builtin.assert": {"quiet": True, "that": ["__checkpoint_tools_pins == %s" % json.dumps(pins)]}},
        {"name": "probe", "ansible.builtin.command": {"argv": "{{ __checkpoint_hub_version_probe.argv }}"},
         "vars": {"checkpoint_tools_venv": venv}, "register": "probe", "changed_when": False},
        {"name": "probe reads every pin", "ansible.builtin.assert": {"quiet": True, "that": [
            "(probe.stdout | from_json).keys() | sort == %s" % json.dumps(sorted(pins)),
            "(probe.stdout | from_json)['pyyaml'] == '%s'" % yaml.__version__,   # this venv's PyYAML, read by name
            "(probe.stdout | from_json)['hf-xet'] is none or (probe.stdout | from_json)['hf-xet'] is string"]}},
        {"name": "the locked version passes", "vars": problems,
         "ansible.builtin.assert": {"quiet": True, "that": ["__p | select('search', 'huggingface_hub') | list == []"]}},
        {"name": "another version stops naming the variable, the value and the lock", "vars": dict(
            problems, checkpoint_huggingface_hub_version="2.5.0"),
         "ansible.builtin.assert": {"quiet": True, "that": [
             "__p | select('search', 'checkpoint_huggingface_hub_version is \"2.5.0\", expected \"%s\", the version the "
             "hash-locked roles/checkpoint/files/hf-tools-requirements.txt pins') | list | length == 1" % pins["huggingface-hub"]],
             "fail_msg": "{{ __p }}"}},
    ]
    play_vars = {"groups": {"spark_head": ["h"], "spark_workers": ["w"]}, "ansible_python_interpreter": sys.executable}
    roleplay.run_role_tasks(tmp_path, "checkpoint", tasks, play_vars=play_vars)
