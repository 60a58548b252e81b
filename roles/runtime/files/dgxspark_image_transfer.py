# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serve one saved container image to the listed peers, once each, then exit.

The runtime role's offline transfer runs this on the head as a transient unit
(systemd-run --collect, RuntimeMaxSec bounds it) for the length of one transfer:

    dgxspark_image_transfer.py --bind IP --port N --file PATH --token-file PATH
                               --peer IP [--peer IP ...]

- binds IP only (the head's fabric address), never the wildcard;
- a connection from an address that is not a --peer is closed before anything
  is read from it;
- a request without ``Authorization: Bearer <token>`` (the token read from
  --token-file, which must be a regular file that only its owner can read or
  write, or from stdin with ``-``) gets 401; with the token, any path but
  ``/<basename of --file>`` gets 404 and any method but GET 405/501;
- the file is sent whole (Content-Length, then the connection is closed); a
  peer counts as served only when every byte went out and the peer then closed
  its end cleanly (EOF). A peer that stops reading early closes with data
  unread, the kernel answers with a reset, and that fetch does not count;
- once every peer was served the server exits 0 by itself.

The token is never logged: one line per request goes to stderr (peer, method,
path, status, outcome). The first line says where it listens (with --port 0,
the port the kernel picked). Exit 2: usage error (bad arguments, unreadable or
loosely permitted token file, missing file).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import socket
import socketserver
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

# How long one connection may stall (no byte in or out) before it is dropped.
IO_TIMEOUT = 300.0
# How long a peer may take to close its end after the last byte.
CLOSE_TIMEOUT = 60.0


def log(message):
    sys.stderr.write('dgxspark-image-transfer: %s\n' % message)
    sys.stderr.flush()


def read_token(path):
    """The token from ``path`` (or stdin for ``-``); raises ValueError with a reason (never the value)."""
    if path == '-':
        text = sys.stdin.readline()
    else:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
        except OSError as exc:
            raise ValueError('cannot open the token file %s: %s' % (path, exc.strerror))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValueError('the token file %s is not a regular file' % path)
            if info.st_mode & 0o077:
                raise ValueError('the token file %s has mode %04o; expected 0600 or stricter'
                                 % (path, stat.S_IMODE(info.st_mode)))
            with os.fdopen(fd, 'r', encoding='utf-8') as handle:
                fd = None
                text = handle.readline()
        finally:
            if fd is not None:
                os.close(fd)
    token = text.strip()
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ValueError('the token (from %s) must be one word of at least 16 characters' % path)
    return token


class TransferServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, path, token, peers):
        self.file_path = path
        self.url_path = '/' + os.path.basename(path)
        self.expected_auth = ('Bearer ' + token).encode('utf-8')
        self.peers = frozenset(peers)
        self.served = set()
        self.lock = threading.Lock()
        self.all_served = threading.Event()
        HTTPServer.__init__(self, address, TransferHandler)

    def verify_request(self, request, client_address):
        peer = client_address[0]
        if peer not in self.peers:
            log('%s: not a peer, connection closed' % peer)
            return False
        return True

    def mark_served(self, peer):
        with self.lock:
            self.served.add(peer)
            done = self.served >= self.peers
        log('%s: served (%d of %d peers)' % (peer, len(self.served & self.peers), len(self.peers)))
        if done:
            self.all_served.set()


class TransferHandler(BaseHTTPRequestHandler):
    server_version = 'dgxspark-image-transfer'
    sys_version = ''
    timeout = IO_TIMEOUT

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        # The request line and status only (never a header: the token is one).
        log('%s: %s' % (self.client_address[0], format % args))

    def _refuse(self, code, reason):
        self.send_response(code)
        self.send_header('Content-Length', '0')
        self.send_header('Connection', 'close')
        if code == 401:
            self.send_header('WWW-Authenticate', 'Bearer')
        self.end_headers()
        log('%s: %s' % (self.client_address[0], reason))

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        server = self.server
        given = (self.headers.get('Authorization') or '').encode('utf-8', 'replace')
        if not hmac.compare_digest(given, server.expected_auth):
            self._refuse(401, 'no or wrong token')
            return
        if self.path != server.url_path:
            self._refuse(404, 'no such file')
            return
        try:
            handle = open(server.file_path, 'rb')
        except OSError as exc:
            self._refuse(404, 'cannot open the file: %s' % exc.strerror)
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            self.send_response(200)
            self.send_header('Content-Type', 'application/x-tar')
            self.send_header('Content-Length', str(size))
            self.send_header('Connection', 'close')
            self.end_headers()
            self.wfile.flush()
            try:
                sent = self.connection.sendfile(handle)
            except OSError as exc:
                log('%s: incomplete (%s)' % (self.client_address[0], exc.strerror or exc))
                return
        if sent != size:
            log('%s: incomplete (%d of %d bytes sent)' % (self.client_address[0], sent, size))
            return
        if self._peer_closed_cleanly():
            log('%s: complete (%d bytes)' % (self.client_address[0], size))
            server.mark_served(self.client_address[0])
        else:
            log('%s: incomplete (the peer did not read the whole file)' % self.client_address[0])
        self.close_connection = True

    def _peer_closed_cleanly(self):
        """After the last byte: half-close, then wait for the peer's EOF (a reset: it left data unread)."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(CLOSE_TIMEOUT)
            while True:
                chunk = self.connection.recv(65536)
                if not chunk:
                    return True
        except OSError:
            return False


def parse_args(argv):
    parser = argparse.ArgumentParser(description='Serve one file to the listed peers, once each, then exit.')
    parser.add_argument('--bind', required=True, help='the one address to listen on')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--file', required=True)
    parser.add_argument('--token-file', required=True, help="a 0600 file holding the token, or '-' for stdin")
    parser.add_argument('--peer', action='append', required=True, help='an address allowed to fetch (repeat)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        bind = ipaddress.ip_address(args.bind)
        peers = [str(ipaddress.ip_address(p)) for p in args.peer]
    except ValueError as exc:
        log('usage: %s' % exc)
        return 2
    if bind.is_unspecified:
        log('usage: --bind %s is the wildcard; give the one address to listen on' % bind)
        return 2
    if not 0 <= args.port <= 65535:
        log('usage: --port %d is out of range' % args.port)
        return 2
    if not os.path.isfile(args.file):
        log('usage: --file %s is not a file' % args.file)
        return 2
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        log('usage: %s' % exc)
        return 2
    if bind.version == 6:
        TransferServer.address_family = socket.AF_INET6
    try:
        server = TransferServer((str(bind), args.port), args.file, token, peers)
    except OSError as exc:
        log('cannot listen on %s:%d: %s' % (bind, args.port, exc.strerror or exc))
        return 1
    host, port = server.server_address[:2]
    log('serving %s on %s:%d to %s' % (server.url_path, host, port, ', '.join(sorted(server.peers))))
    thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.2})
    thread.daemon = True
    thread.start()
    server.all_served.wait()
    server.shutdown()
    server.server_close()
    log('every peer fetched the whole file; exiting')
    return 0


if __name__ == '__main__':
    sys.exit(main())
