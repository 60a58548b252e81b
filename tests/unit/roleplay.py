# -*- coding: utf-8 -*-
"""Run tasks on localhost with a role's real defaults and vars (ansible-playbook of this venv), so a test
evaluates the role's own templates instead of a copy of them. Shared by the tests under tests/unit/plugins
that check what a role renders (the runtime's offline flag, its --revision, the venv's install commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_role_tasks(tmp_path, role, tasks, play_vars=None):
    """Run ``tasks`` in one play with roles/<role>/defaults and vars loaded; fail unless every task was ok.

    Returns the ansible-playbook output. Each task is expected to report one ``ok: [localhost]``.
    """
    proc = run_role_play(tmp_path, role, tasks, play_vars)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.stdout.count("ok: [localhost]") == len(tasks), proc.stdout[-4000:]
    return proc.stdout


def run_role_play(tmp_path, role, tasks, play_vars=None):
    """Run ``tasks`` as run_role_tasks does, and return the finished process whatever its outcome."""
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": dict({"role_path": os.path.join(ROOT, "roles", role)}, **(play_vars or {})),
             "vars_files": [os.path.join(ROOT, "roles", role, "defaults", "main.yml"),
                            os.path.join(ROOT, "roles", role, "vars", "main.yml")],
             "tasks": tasks}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    binary = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return subprocess.run([binary, "-i", "localhost,", str(playbook)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
