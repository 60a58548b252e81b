# -*- coding: utf-8 -*-
"""A venv counts as complete only when its pip imports (issue 13): the runtime's and the checkpoint tools' venv
tasks probe ``bin/python -c 'import pip'`` and run ``python3 -m venv`` again when it fails, which completes a
venv an interrupted ensurepip left without pip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[3] / 'roles'


def _tasks(path):
    return yaml.safe_load((ROLES / path).read_text())


def test_running_venv_again_completes_a_venv_without_pip(tmp_path):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    probe = [str(venv / 'bin' / 'python'), '-c', 'import pip']
    assert subprocess.run(probe, capture_output=True, check=False).returncode != 0  # what `creates: bin/python` accepted
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    assert subprocess.run(probe, capture_output=True, check=False).returncode == 0


def test_the_venv_tasks_probe_pip_instead_of_bin_python():
    for path, probe_name, create_prefix in (
            ('runtime/tasks/venv.yml', "Check the venv's pip imports", 'Create the venv on the host'),
            ('checkpoint/tasks/head.yml', "Check the tools venv's pip imports", 'Create the tools venv')):
        tasks = _tasks(path)
        names = [t.get('name', '') for t in tasks]
        probe = tasks[names.index(probe_name)]
        create = [t for t in tasks if t.get('name', '').startswith(create_prefix)][0]
        assert probe['ansible.builtin.command']['argv'][1:] == ['-c', 'import pip'], path
        assert 'creates' not in create['ansible.builtin.command'], path
        assert create['when'].endswith('.rc != 0'), path
        assert names.index(probe_name) < names.index(create['name']), path
