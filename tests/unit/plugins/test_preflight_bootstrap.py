# -*- coding: utf-8 -*-
"""The preflight's live check of the bootstrap network (roles/preflight/tasks/bootstrap.yml, run by ansible-playbook
with the preflight's real defaults and vars on this machine): a node must carry the address dgxspark_bootstrap names
on that netdev, or the run stops before any change naming the host, the variable, what the netdev carries and what
was expected. Here the netdev is this machine's loopback, which carries 127.0.0.1."""

from __future__ import annotations

import os
import sys

import roleplay

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TASKS = [{"name": "Check the bootstrap address",
          "ansible.builtin.include_tasks": os.path.join(ROOT, "roles", "preflight", "tasks", "bootstrap.yml")}]


def topology(netdev, ipv4):
    return {"preflight_topology": {"bootstrap": True, "nodes": {"localhost": {"bootstrap": {"netdev": netdev, "ipv4": ipv4}}}},
            "ansible_python_interpreter": sys.executable}  # the command module runs here, on this venv's Python


def test_the_address_on_its_netdev_passes(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", TASKS, topology("lo", "127.0.0.1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_another_address_stops_naming_what_the_netdev_carries(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", TASKS, topology("lo", "127.0.0.9"))
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    assert "localhost: dgxspark_bootstrap is lo 127.0.0.9, but lo carries 127.0.0.1" in out, out[-3000:]
    assert "Expected 127.0.0.9 on lo" in out and "Nothing was changed" in out
    assert "Traceback" not in out


def test_a_missing_netdev_stops_naming_it(tmp_path):
    proc = roleplay.run_role_play(tmp_path, "preflight", TASKS, topology("nope0", "192.168.1.11"))
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    assert "localhost: dgxspark_bootstrap is nope0 192.168.1.11, but the node has no netdev nope0" in out, out[-3000:]
