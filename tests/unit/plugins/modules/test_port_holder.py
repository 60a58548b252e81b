# -*- coding: utf-8 -*-
"""plugins/modules/port_holder.py against the real /proc of this machine: a real rsync daemon as the unit's main
process, and a squatter (nobody) that bound the daemon's port first (issue 24 finding 10).

Before the fix roles/checkpoint/tasks/sync_daemon.yml only waited until something answered on the port
(wait_for): the squatter answers, so the head would have connected to it. The module names it and fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import port_holder
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

BIND = '127.0.0.1'
ROOT = os.geteuid() == 0
UNIT = 'dgxspark-checkpoint-rsyncd.service'


def _free_port():
    with socket.socket() as probe:
        probe.bind((BIND, 0))
        return probe.getsockname()[1]


def run(port, main_pid, state='active', timeout=5):
    """main() with `systemctl show` answering MainPID/ActiveState of the unit."""
    def run_command(self, argv, **_kwargs):
        assert argv[:2] == ['systemctl', 'show'] and argv[-1] == UNIT, argv
        return 0, 'MainPID=%d\nActiveState=%s\n' % (main_pid(), state), ''

    with patch_module_args(dict(unit=UNIT, port=port, timeout=timeout)), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'run_command', run_command):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            port_holder.main()
    return excinfo.value


@pytest.fixture
def rsyncd(tmp_path):
    """Start `rsync --daemon --no-detach` on 127.0.0.1:PORT as sync_daemon.yml starts it (address, port, a module)."""
    started = []

    def start(port):
        (tmp_path / 'module').mkdir(exist_ok=True)
        config = tmp_path / 'rsyncd.conf'
        config.write_text('address = %s\nport = %d\nuse chroot = no\nreverse lookup = no\nlog file = %s\n\n'
                          '[checkpoint]\n    path = %s\n    read only = false\n    hosts allow = 127.0.0.1\n'
                          '    hosts deny = *\n' % (BIND, port, tmp_path / 'rsyncd.log', tmp_path / 'module'))
        proc = subprocess.Popen(['rsync', '--daemon', '--no-detach', '--config=%s' % config],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def squatter():
    """A listener on a free loopback port, bound by an unprivileged user (nobody) in a forked child."""
    import pwd
    uid = pwd.getpwnam('nobody').pw_uid if ROOT else os.geteuid()
    port = _free_port()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(ready_r)
            if ROOT:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            sock = socket.socket()
            sock.bind((BIND, port))
            sock.listen(5)
            os.write(ready_w, b'1')
            while True:
                time.sleep(60)
        except BaseException:  # noqa: B902 - report through the exit status
            os._exit(1)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b'1', 'the squatter could not bind port %d' % port
        yield {'pid': pid, 'port': port, 'uid': uid}
    finally:
        os.close(ready_r)
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_the_daemon_holding_its_port_passes(rsyncd):
    port = _free_port()
    daemon = rsyncd(port)
    result = run(port, lambda: daemon.pid, timeout=30)
    assert isinstance(result, ExitJson), result.args[0]
    assert result.args[0]['pid'] == daemon.pid and not result.args[0]['changed']
    assert result.args[0]['msg'] == 'port %d is held by %s (MainPID %d, active)' % (port, UNIT, daemon.pid)


def test_a_squatter_on_the_daemon_port_is_refused_and_named(rsyncd, squatter, tmp_path):
    port = squatter['port']
    # What the old task relied on (wait_for): the port answers. It is the squatter that answers.
    with socket.create_connection((BIND, port), timeout=10):
        pass
    daemon = rsyncd(port)
    daemon.wait(timeout=60)
    log = (tmp_path / 'rsyncd.log').read_text()
    assert daemon.returncode != 0 and 'Address already in use' in log, log
    # The unit's main process is gone (systemd: MainPID 0, failed): the squatter is named, not waited for.
    result = run(port, lambda: 0, state='failed')
    assert isinstance(result, FailJson), result.args[0]
    msg = result.args[0]['msg']
    assert 'pid %d (uid %d)' % (squatter['pid'], squatter['uid']) in msg, msg
    assert msg.endswith('expected %s to hold it' % ('%s (MainPID 0, failed)' % UNIT)), msg
    # Even with a live main process that holds nothing there (this test's own pid), the squatter is refused.
    result = run(port, os.getpid)
    assert isinstance(result, FailJson) and 'pid %d (uid %d)' % (squatter['pid'], squatter['uid']) in \
        result.args[0]['msg']


def test_nothing_listening_fails_once_the_unit_stopped_and_after_the_timeout():
    port = _free_port()
    result = run(port, lambda: 0, state='failed')
    assert isinstance(result, FailJson) and result.args[0]['status'] == 'none'
    assert 'nothing listens on port %d' % port in result.args[0]['msg']
    started = time.monotonic()
    result = run(port, os.getpid, timeout=1)
    assert isinstance(result, FailJson) and 'after 1s' in result.args[0]['msg']
    assert time.monotonic() - started < 10
