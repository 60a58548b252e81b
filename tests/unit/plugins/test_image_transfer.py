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


class Server:
    def __init__(self, tmp_path, peers, token=None, mode=0o600, extra=()):
        self.token = token or 'dgxspark_xfer_' + secrets.token_hex(20)
        self.file = tmp_path / 'image-0123456789abcdef.tar'
        if not self.file.exists():
            self.file.write_bytes(os.urandom(1024 * 1024) * (SIZE // (1024 * 1024)))
        token_file = tmp_path / 'token'
        token_file.write_text(self.token + '\n')
        token_file.chmod(mode)
        argv = [sys.executable, str(SERVER), '--bind', BIND, '--port', '0', '--file', str(self.file),
                '--token-file', str(token_file)] + [a for p in peers for a in ('--peer', p)] + list(extra)
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
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
    token_file = tmp_path / 'token'
    token_file.write_text('x' * 40)
    token_file.chmod(0o600)
    proc = subprocess.run([sys.executable, str(SERVER), '--bind', '0.0.0.0', '--port', '0', '--file', str(token_file),
                           '--token-file', str(token_file), '--peer', PEER_A],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and 'wildcard' in proc.stderr
