# -*- coding: utf-8 -*-
"""preflight's check of every role variable the inventory sets (roles/preflight/tasks/variables.yml, run by
ansible-playbook with the preflight's real defaults and vars): each role's argument spec read once per run, every role
of a host checked in one task; a wrong type or an unknown name stops the run naming the host, the variable, what was
found and what was expected, with a secret's value masked."""

from __future__ import annotations

import os

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VARIABLES = [{"name": "Check the role variables",
              "ansible.builtin.include_tasks": os.path.join(ROOT, "roles", "preflight", "tasks", "variables.yml")}]


def test_good_values_pass(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", VARIABLES,
                                  {"nic_resolver_wait": 20, "runtime_vllm_api_key": "k3y-value", "driver_version": "580.173.02"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout


def test_a_wrong_type_a_masked_secret_and_a_typo_each_stop_the_run_by_name(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", VARIABLES,
                                  {"nic_resolver_wait": "20", "runtime_vllm_api_key": 424242, "nic_resolver_wiat": 5})
    assert proc.returncode != 0
    out = proc.stdout
    assert "localhost: nic_resolver_wait is '20' (string), expected an integer (role nic" in out, out[-3000:]
    assert "localhost: runtime_vllm_api_key is " in out and "(role runtime" in out, out[-3000:]
    assert "424242" not in out + proc.stderr
    assert "nic_resolver_wiat is set (inventory or -e) but no role declares it: did you mean nic_resolver_wait?" in out, out[-3000:]
    # the problems of both roles in one message, the roles in preflight's order (nic before runtime)
    assert out.index("nic_resolver_wait is") < out.index("runtime_vllm_api_key is")
