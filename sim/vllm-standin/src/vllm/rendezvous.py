"""The multi-node rendezvous of the mp backend, over one TCP connection per worker.

The head (node rank 0) listens on --master-addr:--master-port and waits for
nnodes - 1 workers; a --headless worker connects (retrying until the head is
up), registers its rank and engine arguments, and keeps the connection. Both
sides send a heartbeat every second. On the head, a worker whose connection
closes is lost for good (vLLM's mp engine takes no rank back); one that stays
silent for VLLM_STANDIN_PEER_TIMEOUT seconds is stalled (a paused node) until
its heartbeat comes back. The head's engine (server.py) waits on a lost or
stalled rank: real vLLM notices neither (sim/SOURCES.md, "vLLM stand-in: lost
worker").

Messages are JSON lines::

    worker -> head  {"type": "hello", "node_rank": 1, "nnodes": 2, "engine_args": {...}, "version": "..."}
    head -> worker  {"type": "welcome"} | {"type": "reject", "error": "..."}
    head -> worker  {"type": "ready"}      (after all joined and the simulated load)
    both            {"type": "ping"}
    head -> worker  {"type": "shutdown"}   (the head stops)
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Callable, Dict, Optional

from vllm import log

HEARTBEAT_SECONDS = 1.0


def _send(sock: socket.socket, lock: threading.Lock, message: Dict[str, Any]) -> None:
    data = (json.dumps(message, separators=(',', ':')) + '\n').encode()
    with lock:
        sock.sendall(data)


class _Lines:
    """Read JSON lines from a socket with a per-read timeout."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b''

    def read(self, timeout: float) -> Optional[Dict[str, Any]]:
        """One message; None on EOF. Raises socket.timeout / OSError / ValueError."""
        self.sock.settimeout(timeout)
        while b'\n' not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > 1 << 20:
                raise ValueError('message too long')
        line, self.buf = self.buf.split(b'\n', 1)
        message = json.loads(line.decode())
        if not isinstance(message, dict):
            raise ValueError('not a JSON object')
        return message


def engine_args_diff(mine: Dict[str, Any], theirs: Dict[str, Any]) -> list[str]:
    """``name: head-value != worker-value`` for every engine argument that differs."""
    keys = sorted(set(mine) | set(theirs))
    return ['%s: %r != %r' % (k, mine.get(k), theirs.get(k)) for k in keys if mine.get(k) != theirs.get(k)]


class _Peer:
    def __init__(self, rank: int, sock: socket.socket, address: str, lines: _Lines):
        self.rank = rank
        self.sock = sock
        self.address = address
        self.lines = lines
        self.lock = threading.Lock()
        self.closed = False


class Head:
    """Rank 0: accepts the workers, tells them when the engine is ready, watches them."""

    def __init__(self, addr: str, port: int, nnodes: int, engine_args: Dict[str, Any], peer_timeout: float,
                 on_lost: Callable[[int, str, str], None], on_fatal: Callable[[str], None],
                 on_stall: Optional[Callable[[int, str, str], None]] = None,
                 on_resume: Optional[Callable[[int], None]] = None):
        self.addr = addr
        self.port = port
        self.nnodes = nnodes
        self.engine_args = engine_args
        self.peer_timeout = peer_timeout
        self.on_lost = on_lost
        self.on_fatal = on_fatal
        self.on_stall = on_stall        # a silent peer (None: silence counts as lost)
        self.on_resume = on_resume
        self.peers: Dict[int, _Peer] = {}
        self.lock = threading.Lock()
        self.all_joined = threading.Event()
        self.stopping = threading.Event()
        self.server: Optional[socket.socket] = None

    def start(self) -> None:
        """Bind and listen on master-addr:master-port (OSError when the address is not this host's)."""
        family = socket.AF_INET6 if ':' in self.addr else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((self.addr, self.port))
            server.listen(16)
        except OSError:
            server.close()
            raise
        self.server = server
        log.info('dist', 'Rendezvous for %d node(s) listening on %s:%d; waiting for %d worker node(s) (--headless, node ranks 1..%d)',
                 self.nnodes, self.addr, self.port, self.nnodes - 1, self.nnodes - 1)
        threading.Thread(target=self._accept_loop, name='rendezvous-accept', daemon=True).start()
        threading.Thread(target=self._heartbeat_loop, name='rendezvous-heartbeat', daemon=True).start()
        if self.nnodes == 1:
            self.all_joined.set()

    def _accept_loop(self) -> None:
        assert self.server is not None
        while not self.stopping.is_set():
            try:
                sock, address = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock, '%s:%d' % address[:2]), daemon=True).start()

    def _handshake(self, sock: socket.socket, address: str) -> None:
        lines = _Lines(sock)
        lock = threading.Lock()
        try:
            hello = lines.read(10.0)
        except (OSError, ValueError) as exc:
            log.warning('dist', 'Rendezvous: dropped a connection from %s without a valid hello (%s)', address, exc)
            sock.close()
            return
        if not hello or hello.get('type') != 'hello':
            log.warning('dist', 'Rendezvous: dropped a connection from %s without a hello', address)
            sock.close()
            return
        rank = hello.get('node_rank')
        error = None
        fatal = False
        quiet = False       # a worker back after its loss: the serving head logs nothing (the worker says why it stops)
        with self.lock:
            if not isinstance(rank, int) or not 1 <= rank < self.nnodes:
                error = 'node rank %r is not a worker rank of this cluster (1..%d)' % (rank, self.nnodes - 1)
            elif hello.get('nnodes') != self.nnodes:
                error = '--nnodes %r on node rank %d, the head has --nnodes %d' % (hello.get('nnodes'), rank, self.nnodes)
                fatal = True
            elif rank in self.peers and not self.peers[rank].closed:
                error = 'node rank %d has already joined (from %s)' % (rank, self.peers[rank].address)
            elif self.all_joined.is_set():
                error = 'the cluster is already formed; node rank %d cannot rejoin a running engine' % rank
                quiet = True
            else:
                diff = engine_args_diff(self.engine_args, hello.get('engine_args') or {})
                if diff:
                    error = 'engine arguments differ between node rank 0 and node rank %d (head != worker): %s' % (rank, '; '.join(diff))
                    fatal = True
            if error is None:
                peer = _Peer(rank, sock, address, lines)
                peer.lock = lock
                self.peers[rank] = peer
                joined = len([p for p in self.peers.values() if not p.closed])
        if error is not None:
            if not quiet:
                log.error('dist', 'Rendezvous: rejected %s: %s', address, error)
            try:
                _send(sock, lock, {'type': 'reject', 'error': error})
            except OSError:
                pass
            sock.close()
            if fatal:
                self.on_fatal(error)
            return
        try:
            _send(sock, lock, {'type': 'welcome'})
        except OSError as exc:
            self._lost(peer, 'send failed: %s' % exc)
            return
        log.info('dist', 'Node rank %d joined from %s (%d/%d worker nodes)', rank, address, joined, self.nnodes - 1)
        if joined == self.nnodes - 1:
            self.all_joined.set()
        self._read_loop(peer)

    def _read_loop(self, peer: _Peer) -> None:
        stalled = False
        while not self.stopping.is_set():
            try:
                message = peer.lines.read(self.peer_timeout)
            except socket.timeout:
                if self.on_stall is None:
                    self._lost(peer, 'no heartbeat for %.0f s' % self.peer_timeout)
                    return
                if not stalled and not self.stopping.is_set():
                    stalled = True
                    self.on_stall(peer.rank, peer.address.rsplit(':', 1)[0], 'no heartbeat for %.0f s' % self.peer_timeout)
                continue
            except (OSError, ValueError) as exc:
                self._lost(peer, str(exc))
                return
            if message is None:
                self._lost(peer, 'connection closed')
                return
            if stalled:
                stalled = False
                if self.on_resume is not None and not self.stopping.is_set():
                    self.on_resume(peer.rank)

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            for peer in list(self.peers.values()):
                if peer.closed:
                    continue
                try:
                    _send(peer.sock, peer.lock, {'type': 'ping'})
                except OSError as exc:
                    self._lost(peer, 'send failed: %s' % exc)

    def _lost(self, peer: _Peer, reason: str) -> None:
        with self.lock:
            if peer.closed:
                return
            peer.closed = True
        try:
            peer.sock.close()
        except OSError:
            pass
        if not self.stopping.is_set():
            self.on_lost(peer.rank, peer.address.rsplit(':', 1)[0], reason)

    def wait_all(self, stop: threading.Event, log_every: float = 30.0) -> bool:
        """Block until every worker joined (True) or ``stop`` is set (False)."""
        last = time.monotonic()
        while not self.all_joined.wait(0.2):
            if stop.is_set():
                return False
            if time.monotonic() - last >= log_every:
                last = time.monotonic()
                with self.lock:
                    missing = [r for r in range(1, self.nnodes) if r not in self.peers or self.peers[r].closed]
                log.info('dist', 'Still waiting for node rank(s) %s at %s:%d', ', '.join(map(str, missing)), self.addr, self.port)
        return not stop.is_set()

    def announce_ready(self) -> None:
        for peer in list(self.peers.values()):
            try:
                _send(peer.sock, peer.lock, {'type': 'ready'})
            except OSError as exc:
                self._lost(peer, 'send failed: %s' % exc)

    def shutdown(self) -> None:
        """Tell the workers the head stops, then close everything."""
        self.stopping.set()
        for peer in list(self.peers.values()):
            if peer.closed:
                continue
            try:
                _send(peer.sock, peer.lock, {'type': 'shutdown'})
            except OSError:
                pass
            peer.closed = True
            try:
                peer.sock.close()
            except OSError:
                pass
        if self.server is not None:
            try:
                self.server.close()
            except OSError:
                pass


class Worker:
    """A --headless node: joins the head and follows it."""

    def __init__(self, addr: str, port: int, node_rank: int, nnodes: int, engine_args: Dict[str, Any], version: str,
                 peer_timeout: float):
        self.addr = addr
        self.port = port
        self.node_rank = node_rank
        self.nnodes = nnodes
        self.engine_args = engine_args
        self.version = version
        self.peer_timeout = peer_timeout
        self.sock: Optional[socket.socket] = None
        self.lines: Optional[_Lines] = None
        self.lock = threading.Lock()
        self.closing = threading.Event()

    def connect(self, stop: threading.Event, log_every: float = 30.0) -> bool:
        """Connect to the head, retrying every second until it answers (True) or ``stop`` is set (False)."""
        last = 0.0
        while not stop.is_set():
            try:
                sock = socket.create_connection((self.addr, self.port), timeout=2.0)
            except OSError as exc:
                if time.monotonic() - last >= log_every:
                    last = time.monotonic()
                    log.info('dist', 'Waiting for the head at %s:%d (node rank %d of %d): %s',
                             self.addr, self.port, self.node_rank, self.nnodes, exc)
                stop.wait(1.0)
                continue
            self.sock = sock
            self.lines = _Lines(sock)
            return True
        return False

    def register(self) -> Optional[str]:
        """Send the hello; None when welcomed, else the reason."""
        assert self.sock is not None and self.lines is not None
        try:
            _send(self.sock, self.lock, {'type': 'hello', 'node_rank': self.node_rank, 'nnodes': self.nnodes,
                                         'engine_args': self.engine_args, 'version': self.version})
            reply = self.lines.read(30.0)
        except (OSError, ValueError) as exc:
            return 'the head did not answer the registration: %s' % exc
        if reply is None:
            return 'the head closed the connection during registration'
        if reply.get('type') == 'reject':
            return 'the head rejected node rank %d: %s' % (self.node_rank, reply.get('error'))
        if reply.get('type') != 'welcome':
            return 'unexpected answer from the head: %r' % (reply,)
        log.info('dist', 'Joined the head at %s:%d as node rank %d of %d', self.addr, self.port, self.node_rank, self.nnodes)
        threading.Thread(target=self._heartbeat_loop, name='rendezvous-heartbeat', daemon=True).start()
        return None

    def _heartbeat_loop(self) -> None:
        assert self.sock is not None
        while not self.closing.wait(HEARTBEAT_SECONDS):
            try:
                _send(self.sock, self.lock, {'type': 'ping'})
            except OSError:
                return

    def follow(self, on_ready: Callable[[], None]) -> str:
        """Read from the head until the connection ends; returns why it ended."""
        assert self.lines is not None
        while not self.closing.is_set():
            try:
                message = self.lines.read(self.peer_timeout)
            except socket.timeout:
                return 'no heartbeat from the head for %.0f s' % self.peer_timeout
            except (OSError, ValueError) as exc:
                if self.closing.is_set():
                    break
                return 'connection to the head failed: %s' % exc
            if message is None:
                return 'the head closed the connection'
            kind = message.get('type')
            if kind == 'ready':
                on_ready()
            elif kind == 'shutdown':
                return 'the head shut down'
        return 'stopping'

    def close(self) -> None:
        self.closing.set()
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self.sock.close()
            except OSError:
                pass
