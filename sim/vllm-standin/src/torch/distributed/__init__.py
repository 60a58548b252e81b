"""torch.distributed of the stand-in: one rank per node, the NCCL backend, over the sim's fabric.

The ranks meet at ``init_method="tcp://MASTER:PORT"`` (rank 0 listens there, the others connect and retry until
the timeout): the stand-in's own wire form (the real one is TCPStore's; only these ranks speak it). NCCL's
communicator comes up at ``init_process_group`` when ``device_id`` is given (torch's eager
``eager_connect_single_device``), else at the first collective: each rank checks its own RoCE setup against the
node's live GID table with the vLLM stand-in's ``vllm.nccl.init_problem`` (NCCL v2.27.7's rules) and the ranks
exchange the verdicts. A rank whose setup fails raises torch's ``DistBackendError`` with NCCL's "unhandled system
error" and its "Last error" (torch/csrc/distributed/c10d/NCCLUtils.{hpp,cpp} C10D_NCCL_CHECK,
getNcclErrorDetailStr; NCCL src/init.cc ncclGetErrorString); the others raise it with ncclRemoteError's text.

``all_reduce`` sums the (uniform) tensors of every rank and takes the time NCCL would on the sim's fabric:
bytes * 2 * (N - 1) / N / busbw, busbw the slowest node's (torch/_sim.py), so nccl-tests' formula reads that
busbw back. Timeouts, a listen that fails and a lost peer raise torch's exception types (DistStoreError,
DistNetworkError, DistBackendError, all RuntimeError subclasses via DistError).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional

from .. import _sim

NCCL_VERSION = '2.27.7'
DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)


class DistError(RuntimeError):
    """torch.distributed.DistError (a RuntimeError)."""


class DistBackendError(DistError):
    """torch.distributed.DistBackendError."""


class DistStoreError(DistError):
    """torch.distributed.DistStoreError."""


class DistNetworkError(DistError):
    """torch.distributed.DistNetworkError."""


class ReduceOp:
    SUM = 'sum'


_group: Optional['_Group'] = None


def _nccl_error(where: str, kind: str, last: str) -> str:
    if kind == 'system':
        head, detail = ('unhandled system error (run with NCCL_DEBUG=INFO for details)',
                        'ncclSystemError: System call (e.g. socket, malloc) or external library call failed or '
                        'device error. ')
    else:
        head, detail = ('remote process exited or there was a network error',
                        'ncclRemoteError: A call failed possibly due to a network error or a remote process exiting '
                        'prematurely.')
    return 'NCCL error in: /pytorch/torch/csrc/distributed/c10d/%s, %s, NCCL version %s\n%s\nLast error:\n%s' % (
        where, head, NCCL_VERSION, detail, last)


def _send(sock: socket.socket, message: Dict[str, Any]) -> None:
    sock.sendall((json.dumps(message) + '\n').encode())


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b''

    def read(self, deadline: float) -> Dict[str, Any]:
        while b'\n' not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout('timed out')
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionResetError('connection closed by the peer')
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b'\n')
        return json.loads(line.decode())


class _Group:
    def __init__(self, rank: int, world: int, addr: str, port: int, timeout: float) -> None:
        self.rank, self.world, self.addr, self.port, self.timeout = rank, world, addr, port, timeout
        self.peers: List[_Reader] = []       # rank 0: one per other rank, in rank order
        self.master: Optional[_Reader] = None
        self.busbw = 0.0
        self.nccl_up = False
        self.seq = 0

    # ---------------------------------------------------------------- rendezvous
    def join(self) -> None:
        deadline = time.monotonic() + self.timeout
        if self.rank == 0:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind((self.addr, self.port))
                server.listen(self.world)
            except OSError as exc:
                raise DistNetworkError('The server socket has failed to listen on any local network address. '
                                       'port: %d, useIpv6: 0, code: -%d, name: %s, message: %s'
                                       % (self.port, exc.errno or 0, _errname(exc.errno), exc.strerror)) from None
            joined: Dict[int, _Reader] = {}
            try:
                while len(joined) < self.world - 1:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DistStoreError('Timed out after %d seconds waiting for clients. %d/%d clients joined.'
                                             % (self.timeout, len(joined) + 1, self.world))
                    server.settimeout(left)
                    try:
                        conn, _ = server.accept()
                    except socket.timeout:
                        continue
                    reader = _Reader(conn)
                    hello = reader.read(deadline)
                    if hello.get('world') != self.world:
                        conn.close()
                        raise DistStoreError('rank %s joined with world_size %s, this rank has %d'
                                             % (hello.get('rank'), hello.get('world'), self.world))
                    joined[int(hello['rank'])] = reader
            finally:
                server.close()
            self.peers = [joined[r] for r in sorted(joined)]
        else:
            while True:
                try:
                    sock = socket.create_connection((self.addr, self.port), timeout=2)
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        raise DistNetworkError('The client socket has timed out after %dms while trying to connect '
                                               'to (%s, %d).' % (self.timeout * 1000, self.addr, self.port)) from None
                    time.sleep(0.2)
            self.master = _Reader(sock)
            _send(sock, {'rank': self.rank, 'world': self.world})

    # ---------------------------------------------------------------- NCCL's communicator
    def connect_nccl(self, where: str) -> None:
        if self.nccl_up:
            return
        from vllm import nccl as vllm_nccl  # pylint: disable=import-outside-toplevel
        mine = {'rank': self.rank, 'problem': vllm_nccl.init_problem(os.environ), 'busbw': _sim.busbw()}
        if mine['problem']:
            for line in vllm_nccl.failure_lines(mine['problem'], self.rank)[:1]:
                sys.stderr.write(line + '\n')
        verdict = self._gather_scatter(mine, lambda items: {
            'problems': {str(i['rank']): i['problem'] for i in items if i['problem']},
            'busbw': min(float(i['busbw']) for i in items)})
        problems = verdict['problems']
        if str(self.rank) in problems:
            raise DistBackendError(_nccl_error(where, 'system', problems[str(self.rank)]))
        if problems:
            failed = sorted(problems, key=int)[0]
            raise DistBackendError(_nccl_error(where, 'remote', 'rank %s failed its NCCL init: %s'
                                               % (failed, problems[failed])))
        self.busbw = float(verdict['busbw'])
        self.nccl_up = True

    def _gather_scatter(self, mine: Dict[str, Any], combine: Any) -> Dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        try:
            if self.rank == 0:
                items = [mine] + [peer.read(deadline) for peer in self.peers]
                out = combine(items)
                for peer in self.peers:
                    _send(peer.sock, out)
                return out
            assert self.master is not None
            _send(self.master.sock, mine)
            return self.master.read(deadline)
        except (OSError, ValueError) as exc:
            raise DistBackendError(_nccl_error('ProcessGroupNCCL.cpp:2501', 'remote', str(exc))) from None

    # ---------------------------------------------------------------- collectives
    def all_reduce(self, tensor: Any) -> None:
        self.connect_nccl('ProcessGroupNCCL.cpp:3690')
        start = time.monotonic()
        self.seq += 1
        out = self._gather_scatter({'rank': self.rank, 'seq': self.seq, 'value': float(tensor.value)},
                                   lambda items: {'sum': sum(float(i['value']) for i in items)})
        tensor.value = float(out['sum'])
        nbytes = tensor.numel() * tensor.element_size()
        took = nbytes * 2.0 * (self.world - 1) / self.world / (self.busbw * 1e9) if self.world > 1 else 0.0
        left = start + took - time.monotonic()
        if left > 0:
            time.sleep(left)

    def close(self) -> None:
        for reader in self.peers + ([self.master] if self.master else []):
            try:
                reader.sock.close()
            except OSError:
                pass


def _errname(errno_: Optional[int]) -> str:
    import errno as errno_mod  # pylint: disable=import-outside-toplevel
    return errno_mod.errorcode.get(errno_ or 0, 'UNKNOWN')


def init_process_group(backend: str = 'nccl', init_method: Optional[str] = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = '',
                       pg_options: Any = None, device_id: Any = None) -> None:
    global _group  # pylint: disable=global-statement
    if _group is not None:
        raise ValueError('trying to initialize the default process group twice!')
    if backend != 'nccl':
        raise ValueError('the spark-sim torch stand-in has the nccl backend only, not %r' % backend)
    method = init_method or 'env://'
    if method.startswith('env://'):
        addr, port = os.environ.get('MASTER_ADDR', ''), int(os.environ.get('MASTER_PORT', '0'))
        rank = int(os.environ.get('RANK', rank)) if rank < 0 else rank
        world_size = int(os.environ.get('WORLD_SIZE', world_size)) if world_size < 0 else world_size
    elif method.startswith('tcp://'):
        addr, _, port_text = method[len('tcp://'):].rpartition(':')
        port = int(port_text)
    else:
        raise ValueError('init_method %r: the stand-in knows tcp:// and env://' % method)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError('rank %d, world_size %d' % (rank, world_size))
    seconds = (timeout or DEFAULT_TIMEOUT).total_seconds()
    group = _Group(rank, world_size, addr, port, seconds)
    if device_id is not None:
        from .. import cuda  # pylint: disable=import-outside-toplevel
        cuda._lazy_init()   # pylint: disable=protected-access
    group.join()
    _group = group
    if device_id is not None:
        group.connect_nccl('NCCLUtils.cpp:93')


def _default() -> _Group:
    if _group is None:
        raise ValueError('Default process group has not been initialized, please make sure to call '
                         'init_process_group.')
    return _group


def is_initialized() -> bool:
    return _group is not None


def get_rank() -> int:
    return _default().rank


def get_world_size() -> int:
    return _default().world


def all_reduce(tensor: Any, op: str = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> None:
    _default().all_reduce(tensor)


def barrier(group: Any = None) -> None:
    from .._tensor import float32, device, Tensor  # pylint: disable=import-outside-toplevel
    _default().all_reduce(Tensor(0, 0.0, float32, device('cuda', 0)))


def destroy_process_group(group: Any = None) -> None:
    global _group  # pylint: disable=global-statement
    if _group is not None:
        _group.close()
    _group = None
