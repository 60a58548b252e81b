# -*- coding: utf-8 -*-
"""roles/runtime/files/dgxspark_image_transfer.py run as a subprocess, over loopback only.

The server binds 127.0.0.1; the peers are loopback addresses the clients bind their end to
(127.0.0.2, 127.0.0.3: Linux routes all of 127/8 to lo), so "a peer" and "not a peer" are both
real connections from real source addresses.
"""

from __future__ import annotations

import http.client
import os
import queue
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
SERVER = REPO_ROOT / 'roles' / 'runtime' / 'files' / 'dgxspark_image_transfer.py'
BIND = '127.0.0.1'
PEER_A, PEER_B, STRANGER = '127.0.0.2', '127.0.0.3', '127.0.0.4'
# Bigger than loopback's socket buffers, so a reader that stops early leaves the server mid-file.
SIZE = 24 * 1024 * 1024


ROOT = os.geteuid() == 0
# The service manager's side of OpenFile= as the server meets it (sd_listen_fds(3)): the opened files at fd 3, 4, ...
# named in LISTEN_FDNAMES, LISTEN_PID the server's own pid; and DynamicUser=: when this test runs as root, the
# server runs as nobody, who cannot open the files in tmp_path (pytest's root-only directory) by path.
LAUNCH = r"""
import os, sys
fds = [int(fd) for fd in sys.argv[1].split(',') if fd]
high = [os.dup2(fd, 200 + index) for index, fd in enumerate(fds)]
for index, fd in enumerate(high):
    os.dup2(fd, 3 + index)
    os.close(fd)
if int(sys.argv[3]) >= 0:
    os.setgroups([])
    os.setgid(int(sys.argv[3]))
    os.setuid(int(sys.argv[3]))
env = dict(os.environ, LISTEN_FDS=str(len(fds)), LISTEN_FDNAMES=sys.argv[2])
env['LISTEN_PID'] = sys.argv[4] if sys.argv[4] else str(os.getpid())
os.execve(sys.argv[5], sys.argv[5:], env)
"""
# nobody's python: this interpreter may live below /root (pyenv); the node runs the server with /usr/bin/python3.
PYTHON = '/usr/bin/python3' if ROOT and os.path.exists('/usr/bin/python3') else sys.executable


@pytest.fixture(scope='module', autouse=True)
def server_copy():
    """The server script where nobody can read it (pytest's tmp_path and a checkout below /root are root-only)."""
    import shutil
    import tempfile
    global SERVER_RUN  # pylint: disable=global-statement
    directory = Path(tempfile.mkdtemp(prefix='dgxspark-image-transfer-'))
    directory.chmod(0o755)
    copy = directory / SERVER.name
    copy.write_bytes(SERVER.read_bytes())
    copy.chmod(0o644)
    SERVER_RUN = copy
    yield copy
    SERVER_RUN = SERVER
    shutil.rmtree(str(directory))


SERVER_RUN = SERVER


def nobody():
    import pwd
    return pwd.getpwnam('nobody').pw_uid if ROOT else -1


def launch(argv, files, names, uid=None, listen_pid='', **popen):
    """Run ``argv`` (after python) with ``files`` opened read-only and passed as systemd passes OpenFile= files."""
    fds = [os.open(str(path), os.O_RDONLY) for path in files]
    try:
        return subprocess.Popen([sys.executable, '-c', LAUNCH, ','.join(map(str, fds)), ':'.join(names),
                                 str(nobody() if uid is None else uid), listen_pid, PYTHON] + list(argv),
                                pass_fds=fds, **popen)
    finally:
        for fd in fds:
            os.close(fd)


class Server:
    def __init__(self, tmp_path, peers, token=None, mode=0o600, extra=(), uid=None, names=('image', 'token')):
        self.token = token or 'dgxspark_xfer_' + secrets.token_hex(20)
        self.file = tmp_path / 'image-0123456789abcdef.tar'
        if not self.file.exists():
            self.file.write_bytes(os.urandom(1024 * 1024) * (SIZE // (1024 * 1024)))
            self.file.chmod(0o600)
        token_file = tmp_path / 'token'
        token_file.write_text(self.token + '\n')
        token_file.chmod(mode)
        argv = [str(SERVER_RUN), '--bind', BIND, '--port', '0', '--name', self.file.name] + \
            [a for p in peers for a in ('--peer', p)] + list(extra)
        self.proc = launch(argv, [self.file, token_file][:len(names)], names, uid=uid,
                           stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines = queue.Queue()
        self.all_lines = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = None

    def _pump(self):
        for line in self.proc.stderr:
            self.all_lines.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_line(self, text, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ''
            if line is None or time.monotonic() > deadline:
                pytest.fail('the server never logged %r; it logged: %s' % (text, ''.join(self.all_lines)))
            if text in line:
                return line

    def start(self):
        line = self.wait_line('serving ')
        self.port = int(line.split(' on ', 1)[1].split(' ', 1)[0].rsplit(':', 1)[1])
        return self

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def request(self, source, path=None, token='right', read=True):
        conn = http.client.HTTPConnection(BIND, self.port, timeout=60, source_address=(source, 0))
        headers = {}
        if token == 'right':
            headers['Authorization'] = 'Bearer ' + self.token
        elif token:
            headers['Authorization'] = token
        conn.request('GET', path or '/' + self.file.name, headers=headers)
        response = conn.getresponse()
        body = response.read() if read else None
        conn.close()
        return response.status, body


@pytest.fixture
def serve(tmp_path):
    started = []

    def make(peers, **kwargs):
        server = Server(tmp_path, peers, **kwargs)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def test_one_peer_gets_the_whole_file_and_the_server_exits(serve):
    server = serve([PEER_A]).start()
    status, body = server.request(PEER_A)
    assert status == 200
    assert body == server.file.read_bytes()
    assert server.proc.wait(timeout=60) == 0
    log = ''.join(server.all_lines)
    assert 'every peer fetched the whole file' in log
    assert server.token not in log


def test_refusals_and_a_partial_fetch_keep_it_serving_until_every_peer_has_the_file(serve):
    server = serve([PEER_A, PEER_B]).start()
    assert server.request(PEER_A, path='/etc/passwd')[0] == 404
    assert server.request(PEER_A, path='/')[0] == 404
    assert server.request(PEER_A, path='/../' + server.file.name)[0] == 404
    assert server.request(PEER_A, token=None)[0] == 401
    assert server.request(PEER_A, token='Bearer ' + server.token[:-1] + 'x')[0] == 401
    assert server.request(PEER_A, token=server.token)[0] == 401  # no "Bearer "
    # Without the token the path does not matter: no one learns which paths exist.
    assert server.request(PEER_A, path='/etc/passwd', token=None)[0] == 401

    status, body = server.request(PEER_A)
    assert status == 200 and len(body) == SIZE
    server.wait_line('127.0.0.2: served (1 of 2 peers)')

    # B reads the headers and a few bytes, then hangs up with the rest unread.
    sock = socket.create_connection((BIND, server.port), timeout=60, source_address=(PEER_B, 0))
    sock.sendall(('GET /%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n'
                  % (server.file.name, server.token)).encode())
    assert sock.recv(4096).startswith(b'HTTP/1.0 200')
    sock.close()
    server.wait_line('127.0.0.3: incomplete')
    time.sleep(0.5)
    assert server.proc.poll() is None, 'a partial fetch counted: %s' % ''.join(server.all_lines)

    status, body = server.request(PEER_B)
    assert status == 200 and body == server.file.read_bytes()
    assert server.proc.wait(timeout=60) == 0
    assert server.token not in ''.join(server.all_lines)


def test_a_stranger_gets_a_closed_connection(serve):
    server = serve([PEER_A]).start()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        server.request(STRANGER)
    server.wait_line('127.0.0.4: not a peer, connection closed')
    # The server binds 127.0.0.1 only: another loopback address has nothing listening.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.5', server.port), timeout=30).close()
    assert server.proc.poll() is None
    assert server.request(PEER_A)[0] == 200
    assert server.proc.wait(timeout=60) == 0


def test_a_triangle_head_serves_each_worker_on_the_address_of_its_own_cable(serve):
    """Three Sparks on direct cables: the head reaches each worker over another cable, so it binds both cables'
    addresses (here 127.0.0.1 and 127.0.0.9); each worker fetches on its own, a peer served on either counts once,
    and the server exits when both have the file."""
    server = serve([PEER_A, PEER_B], extra=['--bind', '127.0.0.9'])
    ports = {}
    for _attempt in range(2):
        line = server.wait_line('serving ')
        addr, port = line.split(' on ', 1)[1].split(' ', 1)[0].rsplit(':', 1)
        ports[addr] = int(port)
    assert sorted(ports) == ['127.0.0.1', '127.0.0.9']
    server.port = ports['127.0.0.1']
    assert server.request(PEER_A)[0] == 200
    server.wait_line('127.0.0.2: served (1 of 2 peers)')
    conn = http.client.HTTPConnection('127.0.0.9', ports['127.0.0.9'], timeout=60, source_address=(PEER_B, 0))
    conn.request('GET', '/' + server.file.name, headers={'Authorization': 'Bearer ' + server.token})
    response = conn.getresponse()
    assert response.status == 200 and response.read() == server.file.read_bytes()
    conn.close()
    assert server.proc.wait(timeout=60) == 0
    assert 'every peer fetched the whole file' in ''.join(server.all_lines)


def test_an_address_given_twice_is_refused(serve):
    server = serve([PEER_A], extra=['--bind', BIND])
    assert server.proc.wait(timeout=60) == 2
    assert 'give each address once' in ''.join(server.all_lines)


@pytest.mark.parametrize('mode', [0o640, 0o604])
def test_a_token_file_others_can_read_is_refused(serve, mode):
    server = serve([PEER_A], mode=mode)
    assert server.proc.wait(timeout=60) == 2
    log = ''.join(server.all_lines)
    assert 'expected 0600 or stricter' in log
    assert server.token not in log


def test_the_wildcard_and_a_short_token_are_refused(serve, tmp_path):
    server = serve([PEER_A], token='short')
    assert server.proc.wait(timeout=60) == 2
    assert 'at least 16 characters' in ''.join(server.all_lines)
    server = serve([PEER_A], extra=['--bind', '0.0.0.0'])
    assert server.proc.wait(timeout=60) == 2
    assert 'wildcard' in ''.join(server.all_lines)


# --------------------------------------------------------------------------- issue 24 finding 10
# The old unit ran the server as root (systemd-run with NoNewPrivileges only; `systemctl show -p UserName
# dgxspark-image-transfer` empty, its /proc/PID/status Uid 0) and the server opened the tar and the token by path
# (--file, --token-file). Now it takes both as descriptors the service manager opened and refuses to run as root.

def test_the_server_serves_from_the_passed_descriptors_as_a_user_who_cannot_open_them(serve):
    server = serve([PEER_A]).start()
    with open('/proc/%d/status' % server.proc.pid, encoding='ascii') as handle:
        uids = [line.split()[1:] for line in handle if line.startswith('Uid:')][0]
    status, body = server.request(PEER_A)
    assert status == 200 and body == server.file.read_bytes()
    assert server.proc.wait(timeout=60) == 0
    log = ''.join(server.all_lines)
    assert ' as uid %d gid ' % int(uids[1]) in log
    if ROOT:
        assert set(uids) == {str(nobody())}, uids
        # The same user cannot open the tar (root 0600 in a root 0700 directory) by path: only the descriptor serves.
        probe = launch(['-c', 'open(%r, "rb")' % str(server.file)], [], [], stderr=subprocess.PIPE, text=True)
        assert probe.wait(timeout=60) != 0 and 'PermissionError' in probe.stderr.read()


def test_the_server_refuses_to_run_as_root(serve):
    if not ROOT:
        pytest.skip('needs root to start the server as root')
    server = serve([PEER_A], uid=-1)
    assert server.proc.wait(timeout=60) == 2
    assert 'runs as root' in ''.join(server.all_lines)


@pytest.mark.parametrize('names,reason', [
    (('image',), 'no file descriptor named token was passed'),
    (('token', 'image'), 'the token is not ASCII text'),  # the tar passed as the token
    (('image', 'image'), 'two descriptors are named image'),
])
def test_missing_or_misnamed_descriptors_are_refused(serve, names, reason):
    server = serve([PEER_A], names=names)
    assert server.proc.wait(timeout=60) == 2
    assert reason in ''.join(server.all_lines)


def test_a_descriptor_that_is_no_regular_file_is_refused(tmp_path):
    (tmp_path / 'token').mkdir()
    proc = launch([str(SERVER_RUN), '--bind', BIND, '--port', '0', '--name', 'x.tar', '--peer', PEER_A],
                  [tmp_path, tmp_path / 'token'], ['image', 'token'], stderr=subprocess.PIPE, text=True)
    assert proc.wait(timeout=60) == 2
    assert 'the descriptor image (fd 3) is not a regular file' in proc.stderr.read()


def test_descriptors_meant_for_another_process_are_not_taken(tmp_path):
    token_file = tmp_path / 'token'
    token_file.write_text('x' * 40)
    token_file.chmod(0o600)
    proc = launch([str(SERVER_RUN), '--bind', BIND, '--port', '0', '--name', 'token', '--peer', PEER_A],
                  [token_file, token_file], ['image', 'token'], listen_pid='1', stderr=subprocess.PIPE, text=True)
    assert proc.wait(timeout=60) == 2
    assert 'no file descriptor named image was passed' in proc.stderr.read()


# --------------------------------------------------------------------------- issue 24 finding 5
# The transfer port is unprivileged: before the fix, a local user who bound it first was what the head's
# wait_for saw (it only connects), and the workers sent it their token and piped its body into
# `docker image load` as root. Neither check below existed in the old code (no --check-listener, no
# --verify-load, no sha256 anywhere in roles/runtime/tasks/transfer.yml), so both tests fail against it.

MODULE_UTILS = REPO_ROOT / 'plugins' / 'module_utils'


def _script(*args, env_extra=None):
    # On a node leftovers.py sits beside the script; here PYTHONPATH stands in for that directory.
    env = dict(os.environ, PYTHONPATH=str(MODULE_UTILS))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, str(SERVER)] + list(args), capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def _free_port():
    with socket.socket() as probe:
        probe.bind((BIND, 0))
        return probe.getsockname()[1]


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


def test_a_squatter_on_the_transfer_port_is_refused_and_named(squatter):
    # What the old code relied on (wait_for): the port answers. It is the squatter that answers.
    with socket.create_connection((BIND, squatter['port']), timeout=10):
        pass
    # The transfer unit's main process (here: this test's process, which holds nothing on the port) is not the holder.
    result = _script('--check-listener', '--port', str(squatter['port']), '--pid', str(os.getpid()))
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'pid %d (uid %d)' % (squatter['pid'], squatter['uid']) in result.stdout
    assert 'port %d is held by' % squatter['port'] in result.stdout
    assert 'expected pid %d to hold it' % os.getpid() in result.stdout
    # Not even the squatter's uid's own processes stand in for the unit: only the pid named.
    result = _script('--check-listener', '--port', str(squatter['port']), '--pid', '1')
    assert result.returncode == 1, result.stdout + result.stderr


def test_the_server_itself_holding_the_port_passes_and_nothing_listening_asks_again(serve, tmp_path):
    server = serve([PEER_A]).start()
    result = _script('--check-listener', '--port', str(server.port), '--pid', str(server.proc.pid))
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'port %d is held by pid %d' % (server.port, server.proc.pid) in result.stdout
    free = _free_port()
    result = _script('--check-listener', '--port', str(free), '--pid', str(server.proc.pid))
    assert result.returncode == 3, result.stdout + result.stderr
    assert 'nothing listens on port %d' % free in result.stdout


def _fake_docker(tmp_path):
    record = tmp_path / 'docker-loaded'
    docker = tmp_path / 'docker'
    docker.write_text('#!/bin/sh\necho "$@" > %s.argv\ncat > %s\n' % (record, record))
    docker.chmod(0o755)
    return docker, record


def test_a_tar_whose_sha256_differs_from_the_heads_is_never_loaded(tmp_path):
    import hashlib
    docker, record = _fake_docker(tmp_path)
    saved = b'the tar the head saved\n' * 1000
    tar = tmp_path / 'image-0123456789abcdef.tar'
    tar.write_bytes(b'a tar a squatter served\n' * 1000)
    expected = hashlib.sha256(saved).hexdigest()
    found = hashlib.sha256(tar.read_bytes()).hexdigest()
    result = _script('--verify-load', '--file', str(tar), '--sha256', expected, '--docker', str(docker))
    assert result.returncode == 1, result.stdout + result.stderr
    assert found in result.stdout and expected in result.stdout and 'not loaded' in result.stdout
    assert not record.exists(), 'docker image load ran on a tar that does not match'


def test_the_heads_tar_is_loaded_and_a_link_is_not_followed(tmp_path):
    import hashlib
    docker, record = _fake_docker(tmp_path)
    tar = tmp_path / 'image-0123456789abcdef.tar'
    tar.write_bytes(b'the tar the head saved\n' * 1000)
    digest = hashlib.sha256(tar.read_bytes()).hexdigest()
    link = tmp_path / 'link.tar'
    link.symlink_to(tar)
    result = _script('--verify-load', '--file', str(link), '--sha256', digest, '--docker', str(docker))
    assert result.returncode == 1 and not record.exists(), result.stdout + result.stderr
    result = _script('--verify-load', '--file', str(tar), '--sha256', digest.upper(), '--docker', str(docker))
    assert result.returncode == 0, result.stdout + result.stderr
    assert record.read_bytes() == tar.read_bytes()
    assert (tmp_path / 'docker-loaded.argv').read_text().split() == ['image', 'load']
