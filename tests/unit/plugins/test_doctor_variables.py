# -*- coding: utf-8 -*-
"""doctor.yml stops on a bad doctor_* value before it reads any node, with a message that names the variable, what
it found and what it expects (roles/doctor/tasks/variables.yml: the preflight's spec_problems over doctor's own
argument spec). Runs doctor.yml against the sim inventory with --tags doctor_variables: the check runs on the
controller (assert), so no node needs to answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def doctor(extravars):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    binary = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return subprocess.run([binary, "-i", os.path.join(ROOT, "inventories", "sim"), os.path.join(ROOT, "doctor.yml"),
                           "--tags", "doctor_variables", "-e", json.dumps(extravars)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_defaults_and_a_controller_report_dir_pass():
    proc = doctor({"doctor_report_dir": "~/reports"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("extravars, message", [
    ({"doctor_nccl_iters": 0}, "spark-head: doctor_nccl_iters is 0, expected between 1 and 10000 (role doctor)"),
    ({"doctor_collective_timeout": 5},
     "spark-head: doctor_collective_timeout is 5, expected between 10 and 3600 (role doctor)"),
    ({"doctor_nccl_size_mb": 65536},
     "spark-head: doctor_nccl_size_mb is 65536, expected between 1 and 16384 (role doctor)"),
])
def test_a_bad_value_stops_naming_the_variable(extravars, message):
    proc = doctor(extravars)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and message in out, out[-3000:]
    assert "Traceback" not in out
