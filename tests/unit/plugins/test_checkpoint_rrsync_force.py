# -*- coding: utf-8 -*-
"""The head's transfer key cannot send rsync --force to a worker (issue 24 finding 10).

rrsync -no-del disables only the --delete* and --remove* options (rsync's support/rrsync, long_opts 'force': 0),
so `--force` (delete a non-empty directory a file replaces: a tree in the worker's cache) passed it. The worker's
authorized_keys line (roles/checkpoint/vars/main.yml __checkpoint_authorized_text, rendered by ansible-playbook with
the role's real vars) now refuses it before rrsync runs. The test runs the line's command as sshd does (the
user's shell -c, SSH_ORIGINAL_COMMAND set) with rrsync replaced by a recorder, and, where /usr/bin/rrsync is
installed, shows the real rrsync -no-del letting --force through (the old line's behaviour).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import roleplay

CACHE = "/var/lib/dgxspark/huggingface/hub"
PUSH = "rsync --server -logDtpre.iLsfxCIvu --partial --no-compress --timeout=300 . " + CACHE + "/models--x/blobs/"


def authorized_line(tmp_path, rrsync):
    out = tmp_path / "line"
    tasks = [
        {"name": "Give localhost the head's fabric address (the preflight's topology fact) and a key", "ansible.builtin.set_fact": {
            "preflight_topology": {"nnodes": 2, "nodes": {"localhost": {"peers": {"localhost": [{"remote": "10.0.0.1"}]}}}},
            "__checkpoint_pubkey": {"stdout": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA test"}}},
        {"name": "Render the line", "ansible.builtin.copy": {"content": "{{ __checkpoint_authorized_text }}",
                                                             "dest": str(out)},
         "vars": {"__checkpoint_my_sources": ["localhost"], "__checkpoint_rrsync": rrsync}},
    ]
    proc = roleplay.run_role_play(tmp_path, "checkpoint", tasks, {"ansible_python_interpreter": sys.executable})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out.read_text()


def sshd_command(line):
    """The command= option as sshd reads it (auth-options.c opt_dequote: \\" -> ")."""
    match = re.search(r'(?:^|,)command="((?:[^"\\]|\\.)*)"', line)
    assert match, line
    return match.group(1).replace('\\"', '"')


def run(command, original):
    env = dict(os.environ, SSH_ORIGINAL_COMMAND=original)
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.fixture
def recorder(tmp_path):
    path = tmp_path / "rrsync"
    path.write_text('#!/bin/sh\necho "RRSYNC $*"\n')
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("original", [
    PUSH.replace(" . ", " --force . "),
    PUSH.replace("rsync --server ", "rsync --server --force "),
    PUSH.replace(" . ", "\t--force . "),
    PUSH.replace(" . ", " --force=1 . "),
    "rsync --server -logDtpre.iLsfxCIvu --force",
], ids=["before-dot", "first", "tab", "with-value", "last"])
def test_force_is_refused_before_rrsync_runs(tmp_path, recorder, original):
    line = authorized_line(tmp_path, recorder)
    assert line.startswith('from="10.0.0.1",restrict,command="') and line.endswith("AIA test")
    result = run(sshd_command(line), original)
    assert result.returncode == 1
    assert "--force is refused" in result.stderr
    assert "RRSYNC" not in result.stdout


def test_the_collections_own_push_reaches_rrsync_with_its_restrictions(tmp_path, recorder):
    result = run(sshd_command(authorized_line(tmp_path, recorder)), PUSH)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "RRSYNC -wo -no-del -no-lock %s" % CACHE


@pytest.mark.skipif(not os.path.exists("/usr/bin/rrsync"), reason="rrsync (rsync >= 3.2.4) is not installed here")
def test_rrsync_no_del_alone_lets_force_through(tmp_path):
    """The old line's command: rrsync refuses --delete but passes --force on to rsync --server."""
    target = tmp_path / "cache"
    target.mkdir()
    argv = ["/usr/bin/rrsync", "-wo", "-no-del", "-no-lock", str(target)]
    push = "rsync --server -logDtpre.iLsfxCIvu %s . models--x/"

    def rrsync(option):
        return subprocess.run(argv, env=dict(os.environ, SSH_ORIGINAL_COMMAND=push % option), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)

    assert "option --delete has been disabled" in rrsync("--delete").stderr
    force = rrsync("--force").stderr
    # rrsync ran rsync --server --force (which then found no client on its stdin)
    assert "rrsync error" not in force and "disabled" not in force, force


def test_every_sender_gets_a_line_of_its_own_from_its_link_address(tmp_path):
    """The fan-out: a worker authorizes the head and the other workers, one line each (a real line break between them:
    sshd reads one key per line), each from that sender's address on the link, each with the same restricted command."""
    out = tmp_path / "lines"
    keys = {"head": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA head", "w1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB w1"}
    tasks = [
        {"name": "Two senders on two links", "ansible.builtin.set_fact": {
            "preflight_topology": {"nnodes": 3, "nodes": {"localhost": {"peers": {
                "localhost": [{"remote": "10.0.0.1"}], "other": [{"remote": "10.0.0.2"}]}}}},
            "__checkpoint_pubkey": {"stdout": keys["head"]}}},
        {"name": "The other sender and its key", "ansible.builtin.add_host": {
            "name": "other", "__checkpoint_pubkey": {"stdout": keys["w1"]}}},
        {"name": "Render the lines", "ansible.builtin.copy": {"content": "{{ __checkpoint_authorized_text }}", "dest": str(out)},
         "vars": {"__checkpoint_my_sources": ["localhost", "other"], "__checkpoint_rrsync": "/usr/bin/rrsync"}},
    ]
    proc = roleplay.run_role_play(tmp_path, "checkpoint", tasks, {"ansible_python_interpreter": sys.executable})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    lines = out.read_text().split("\n")
    assert len(lines) == 2 and "\\n" not in out.read_text(), out.read_text()
    assert lines[0].startswith('from="10.0.0.1",restrict,command="') and lines[0].endswith("AIA head")
    assert lines[1].startswith('from="10.0.0.2",restrict,command="') and lines[1].endswith("AIB w1")
    assert sshd_command(lines[0]) == sshd_command(lines[1])
