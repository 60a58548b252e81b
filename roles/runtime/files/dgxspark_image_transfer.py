# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serve one saved container image to the listed peers, once each, then exit.

The runtime role's offline transfer runs this on the head as a transient unit
(systemd-run --collect, RuntimeMaxSec bounds it) for the length of one transfer,
as a dynamic user without capabilities (DynamicUser=yes, NoNewPrivileges, an empty
CapabilityBoundingSet, ProtectSystem=strict): it opens nothing of root's by path.
The service manager opens the saved tar and the token file (both root 0600 in a
root 0700 directory) and passes the descriptors (OpenFile=PATH:image:read-only,
OpenFile=PATH:token:read-only; systemd >= 253), read as sd_listen_fds_with_names(3)
reads them: LISTEN_PID is this process, LISTEN_FDS of them from fd 3 on, named by
LISTEN_FDNAMES (colon-separated):

    dgxspark_image_transfer.py --bind IP [--bind IP ...] --port N --name FILE.tar
                               --peer IP [--peer IP ...]

- refuses to run as root (exit 2): the unit must drop to its dynamic user;
- ``image`` must be a regular file, ``token`` a regular file that only its
  owner can read or write, holding one word of at least 16 characters;
- binds each IP only (the head's fabric addresses: one per cable that leads to
  a receiving worker, in a triangle of direct cables two), never the wildcard;
  every address serves the same file to the same peers, and a peer served on
  one counts for all;
- a connection from an address that is not a --peer is closed before anything
  is read from it;
- a request without ``Authorization: Bearer <token>`` gets 401; with the
  token, any path but ``/<--name>`` gets 404 and any method but GET 405/501;
- the file is sent whole (Content-Length, then the connection is closed); a
  peer counts as served only when every byte went out and the peer then closed
  its end cleanly (EOF). A peer that stops reading early closes with data
  unread, the kernel answers with a reset, and that fetch does not count;
- once every peer was served the server exits 0 by itself.

The token is never logged: one line per request goes to stderr (peer, method,
path, status, outcome). The first line says where it listens (with --port 0,
the port the kernel picked) and as which uid. Exit 2: usage error (bad
arguments, run as root, a descriptor missing or not a regular file, a loosely
permitted token file).

Before a worker sends anything, the head checks who listens on the port
(the port is unprivileged: any local user may bind it first, take the
workers' token and feed them a tar of its own):

    dgxspark_image_transfer.py --check-listener --port N (--unit NAME | --pid PID)

exit 0 when the unit's main process (or PID) itself holds every LISTEN socket
on N, 3 when nothing listens on N yet (ask again), 1 when another process
holds one (stdout names each holder: pid, uid, command line, and the unit's
state). It reads /proc with the collection's plugins/module_utils/leftovers.py
(installed beside this script; the same parsers as the leftover check).

On a worker, the downloaded tar is loaded only when it is the file the head saved:

    dgxspark_image_transfer.py --verify-load --file PATH --sha256 HEX [--docker docker]

opens PATH (no link followed, a regular file), hashes it, and when the sha256
is HEX feeds that same open file to ``docker image load``; otherwise it exits 1
naming both hashes and runs nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import os
import socket
import socketserver
import stat
import subprocess
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


def listen_fds(environ=None):
    """``{name: fd}`` the service manager passed (as sd_listen_fds_with_names(3) reads them), then unset.

    ``LISTEN_PID`` must be this process (else they were meant for another and none is taken), ``LISTEN_FDS``
    of them from fd 3 (SD_LISTEN_FDS_START) on, named in order by the colon-separated ``LISTEN_FDNAMES``
    (``OpenFile=PATH:NAME:read-only`` names them). Raises ValueError when a name repeats.
    """
    environ = os.environ if environ is None else environ
    try:
        pid = int(environ.get('LISTEN_PID', ''))
        count = int(environ.get('LISTEN_FDS', ''))
    except ValueError:
        return {}
    names = environ.get('LISTEN_FDNAMES', '').split(':')
    for key in ('LISTEN_PID', 'LISTEN_FDS', 'LISTEN_FDNAMES'):
        environ.pop(key, None)
    if pid != os.getpid() or count <= 0:
        return {}
    fds = {}
    for index in range(count):
        fd = 3 + index
        name = names[index] if index < len(names) and names[index] else 'unknown'
        if name in fds:
            raise ValueError('two descriptors are named %s' % name)
        os.set_inheritable(fd, False)
        fds[name] = fd
    return fds


def passed_file(fds, name):
    """The open regular file passed as ``name`` (its fd); raises ValueError naming what is wrong."""
    if name not in fds:
        raise ValueError('no file descriptor named %s was passed (OpenFile=PATH:%s:read-only); got %s'
                         % (name, name, ', '.join(sorted(fds)) or 'none'))
    fd = fds[name]
    try:
        info = os.fstat(fd)
    except OSError as exc:
        raise ValueError('the descriptor %s (fd %d) cannot be read: %s' % (name, fd, exc.strerror))
    if not stat.S_ISREG(info.st_mode):
        raise ValueError('the descriptor %s (fd %d) is not a regular file' % (name, fd))
    return fd, info


def read_token(fd, info):
    """The token from the open file ``fd``; raises ValueError with a reason (never the value)."""
    if info.st_mode & 0o077:
        raise ValueError('the token file has mode %04o; expected 0600 or stricter' % stat.S_IMODE(info.st_mode))
    with os.fdopen(fd, 'rb') as handle:
        raw = handle.readline(4096)
    try:
        token = raw.decode('ascii').strip()
    except UnicodeDecodeError:
        raise ValueError('the token is not ASCII text')
    if any(ord(c) < 32 or ord(c) == 127 for c in token):   # NUL and other controls: a binary file (a tar header)
        raise ValueError('the token is not ASCII text')
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ValueError('the token must be one word of at least 16 characters')
    return token


class TransferServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handle, size, name, token, peers, shared=None):
        self.file_handle = handle
        self.file_size = size
        self.url_path = '/' + name
        self.expected_auth = ('Bearer ' + token).encode('utf-8')
        self.peers = frozenset(peers)
        # the servers of one transfer (one per bound address) share who was served
        self.served, self.lock, self.all_served = shared or (set(), threading.Lock(), threading.Event())
        HTTPServer.__init__(self, address, TransferHandler)

    def shared(self):
        return self.served, self.lock, self.all_served

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
        size = server.file_size
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-tar')
        self.send_header('Content-Length', str(size))
        self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.flush()
        try:
            # One open file for every peer: sendfile from an explicit offset (never the shared file position).
            sent = self.connection.sendfile(server.file_handle, 0, size)
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


def load_leftovers():
    """The collection's leftovers module: the copy installed beside this script, else the collection's own."""
    try:
        import leftovers  # pylint: disable=import-outside-toplevel
    except ImportError:
        from ansible_collections.dgxspark.cluster.plugins.module_utils import leftovers  # pylint: disable=import-outside-toplevel
    return leftovers


def unit_main_pid(unit):
    """``(MainPID, ActiveState)`` of ``unit`` from systemctl show (0 and the state when it runs nothing)."""
    result = subprocess.run(['systemctl', 'show', '--property=MainPID', '--property=ActiveState', unit],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    props = dict(line.split('=', 1) for line in result.stdout.splitlines() if '=' in line)
    try:
        pid = int(props.get('MainPID', '0'))
    except ValueError:
        pid = 0
    return pid, props.get('ActiveState', 'unknown')


def check_listener(argv):
    parser = argparse.ArgumentParser(description='Check that the transfer unit itself holds the port.')
    parser.add_argument('--check-listener', action='store_true', required=True)
    parser.add_argument('--port', type=int, required=True)
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument('--unit', help='the transfer unit (its MainPID must hold the port)')
    who.add_argument('--pid', type=int, help='the process that must hold the port')
    parser.add_argument('--proc-root', default='/proc')
    args = parser.parse_args(argv)
    if args.unit:
        pid, state = unit_main_pid(args.unit)
        owner = '%s (MainPID %d, %s)' % (args.unit, pid, state)
    else:
        pid, owner = args.pid, 'pid %d' % args.pid
    status, reason = load_leftovers().listener_check(args.proc_root, args.port, pid)
    if status == 'ok':
        print('port %d is held by %s' % (args.port, owner))
        return 0
    print('%s; expected %s to hold it' % (reason, owner))
    return 3 if status == 'none' else 1


def file_sha256(handle):
    digest = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1024 * 1024), b''):
        digest.update(chunk)
    return digest.hexdigest()


def verify_load(argv):
    parser = argparse.ArgumentParser(description='Load a downloaded image tar only when its sha256 is the expected one.')
    parser.add_argument('--verify-load', action='store_true', required=True)
    parser.add_argument('--file', required=True)
    parser.add_argument('--sha256', required=True, help='the sha256 the head recorded of the tar it saved')
    parser.add_argument('--docker', default='docker')
    args = parser.parse_args(argv)
    expected = args.sha256.strip().lower()
    if len(expected) != 64 or any(c not in '0123456789abcdef' for c in expected):
        log('usage: --sha256 %r is not 64 hex digits' % args.sha256)
        return 2
    try:
        fd = os.open(args.file, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
    except OSError as exc:
        log('cannot open %s: %s' % (args.file, exc.strerror))
        return 1
    with os.fdopen(fd, 'rb') as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            log('%s is not a regular file; not loaded' % args.file)
            return 1
        found = file_sha256(handle)
        if found != expected:
            print('%s has sha256 %s, the head saved sha256 %s: not loaded' % (args.file, found, expected))
            return 1
        handle.seek(0)
        result = subprocess.run([args.docker, 'image', 'load'], stdin=handle, check=False)
    if result.returncode == 0:
        print('%s (sha256 %s) loaded' % (args.file, found))
    return result.returncode


def parse_args(argv):
    parser = argparse.ArgumentParser(description='Serve one file (passed as a descriptor) to the listed peers, once each.')
    parser.add_argument('--bind', action='append', required=True, help='an address to listen on (repeat)')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--name', required=True, help='the file name the peers ask for (/NAME)')
    parser.add_argument('--peer', action='append', required=True, help='an address allowed to fetch (repeat)')
    return parser.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if '--check-listener' in argv:
        return check_listener(argv)
    if '--verify-load' in argv:
        return verify_load(argv)
    args = parse_args(argv)
    if os.geteuid() == 0:
        log('usage: runs as root; start it as a dynamic user (systemd-run -p DynamicUser=yes) with the files passed '
            'as descriptors (-p OpenFile=PATH:image:read-only -p OpenFile=PATH:token:read-only)')
        return 2
    try:
        binds = [ipaddress.ip_address(b) for b in args.bind]
        peers = [str(ipaddress.ip_address(p)) for p in args.peer]
    except ValueError as exc:
        log('usage: %s' % exc)
        return 2
    for bind in binds:
        if bind.is_unspecified:
            log('usage: --bind %s is the wildcard; give the addresses to listen on' % bind)
            return 2
    if len(set(b.version for b in binds)) != 1 or len(set(binds)) != len(binds):
        log('usage: --bind %s: give each address once, all IPv4 or all IPv6' % ', '.join(str(b) for b in binds))
        return 2
    if not 0 <= args.port <= 65535:
        log('usage: --port %d is out of range' % args.port)
        return 2
    if not args.name or '/' in args.name or args.name in ('.', '..'):
        log('usage: --name %r is not a file name' % args.name)
        return 2
    try:
        fds = listen_fds()
        image_fd, image_info = passed_file(fds, 'image')
        token = read_token(*passed_file(fds, 'token'))
    except ValueError as exc:
        log('usage: %s' % exc)
        return 2
    handle = os.fdopen(image_fd, 'rb')
    if binds[0].version == 6:
        TransferServer.address_family = socket.AF_INET6
    servers = []
    for bind in binds:
        try:
            servers.append(TransferServer((str(bind), args.port), handle, image_info.st_size, args.name, token, peers,
                                          servers[0].shared() if servers else None))
        except OSError as exc:
            log('cannot listen on %s:%d: %s' % (bind, args.port, exc.strerror or exc))
            for server in servers:
                server.server_close()
            return 1
    for server in servers:
        host, port = server.server_address[:2]
        log('serving %s (%d bytes) on %s:%d to %s as uid %d gid %d'
            % (server.url_path, image_info.st_size, host, port, ', '.join(sorted(server.peers)), os.geteuid(),
               os.getegid()))
        thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.2})
        thread.daemon = True
        thread.start()
    servers[0].all_served.wait()
    for server in servers:
        server.shutdown()
        server.server_close()
    handle.close()
    log('every peer fetched the whole file; exiting')
    return 0


if __name__ == '__main__':
    sys.exit(main())
