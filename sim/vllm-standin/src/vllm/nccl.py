"""What NCCL's IB transport checks at communicator init over RoCE, against the node's live sysfs tree.

The real engine creates its NCCL communicator once every rank has joined the
rendezvous. Over RoCE, NCCL opens the devices of ``NCCL_IB_HCA`` (``=dev,dev``
exact, ``dev:port``, a prefix list, or ``^`` to exclude), uses only their
ACTIVE Ethernet ports, and addresses each queue pair with the GID at
``NCCL_IB_GID_INDEX`` (an empty value is read as 0, a link-local fe80 GID; an
unset or negative one lets NCCL >= 2.21 select a GID of family
``NCCL_IB_ADDR_FAMILY``, RoCE version ``NCCL_IB_ROCE_VERSION_NUM``, within
``NCCL_IB_ADDR_RANGE``). A stale index (the GIDs moved at a reboot) names an
empty slot, a v1 GID or another address: the QP transition fails, and the rank
dies at init with "unhandled system error" (seed 003).

``init_problem`` returns that failure, or None. It reads the tree the sim's
stand-ins read (``$SPARK_SIM_SYSFS``, else /var/lib/spark-sim/sys):
``class/infiniband/<dev>/ports/<p>/{state,link_layer,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>}``.
The stand-in takes the worst case where NCCL would fall back to sockets: a
device that is absent, or has no ACTIVE port, fails too. It checks nothing
when ``NCCL_IB_HCA`` is unset, ``NCCL_IB_DISABLE=1`` or ``NCCL_NET`` names
another transport (no RoCE in play).

For every device used, the GID must be a RoCE v<N> IPv4-mapped GID on an
ACTIVE port; ``VLLM_HOST_IP`` (the rank's primary fabric address) must be
carried by one of them (the primary rail's device; a second rail carries its
own address).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Dict, List, Mapping, Optional, Tuple

DEFAULT_SYSFS = '/var/lib/spark-sim/sys'
NCCL_VERSION = '2.27.7'
ZERO_GIDS = ('0000:0000:0000:0000:0000:0000:0000:0000', 'fe80:0000:0000:0000:0000:0000:0000:0000')


def sysfs_root(env: Mapping[str, str]) -> str:
    return env.get('SPARK_SIM_SYSFS') or DEFAULT_SYSFS


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding='utf-8', errors='replace') as handle:
            return handle.read().strip()
    except OSError:
        return None


def _numbers(path: str) -> List[str]:
    try:
        return sorted((n for n in os.listdir(path) if n.isdigit()), key=int)
    except OSError:
        return []


def read_devices(root: str) -> Dict[str, Dict[int, Dict[str, object]]]:
    """``{device: {port: {'state': 'ACTIVE', 'link_layer': 'Ethernet', 'dir': path}}}``."""
    base = os.path.join(root, 'class', 'infiniband')
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    devices: Dict[str, Dict[int, Dict[str, object]]] = {}
    for name in names:
        ports_dir = os.path.join(base, name, 'ports')
        ports: Dict[int, Dict[str, object]] = {}
        for port in _numbers(ports_dir):
            port_dir = os.path.join(ports_dir, port)
            state = (_read(os.path.join(port_dir, 'state')) or '').split(':')[-1].strip().upper()
            ports[int(port)] = {'state': state or 'UNKNOWN', 'link_layer': _read(os.path.join(port_dir, 'link_layer')) or '',
                                'dir': port_dir}
        devices[name] = ports
    return devices


def gid_at(port_dir: str, index: int) -> Tuple[Optional[str], str, str]:
    """(gid or None when the slot does not exist, type text, ndev) of one GID slot."""
    gid = _read(os.path.join(port_dir, 'gids', str(index)))
    kind = _read(os.path.join(port_dir, 'gid_attrs', 'types', str(index))) or ''
    ndev = _read(os.path.join(port_dir, 'gid_attrs', 'ndevs', str(index))) or ''
    return (gid.lower() if gid is not None else None), kind, ndev


def _ipv4(gid: str) -> str:
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return ''
    return str(mapped) if mapped else ''


def _version(kind: str) -> str:
    return 'v2' if kind.replace(' ', '').lower().endswith('rocev2') else 'v1'


def select_devices(hca: str, devices: Mapping[str, Mapping[int, object]]) -> List[Tuple[str, Optional[int]]]:
    """The (device, port or None) pairs NCCL_IB_HCA selects among ``devices`` (NCCL's matching rules)."""
    text = hca.strip()
    exclude = text.startswith('^')
    text = text.lstrip('^')
    exact = text.startswith('=')
    text = text.lstrip('=')
    wanted: List[Tuple[str, Optional[int]]] = []
    for item in text.split(','):
        item = item.strip()
        if not item:
            continue
        name, _sep, port = item.partition(':')
        wanted.append((name, int(port) if port.isdigit() else None))

    def matches(device: str, name: str) -> bool:
        return device == name if exact else device.startswith(name)

    if exclude:
        return [(device, None) for device in devices if not any(matches(device, name) for name, _p in wanted)]
    selected: List[Tuple[str, Optional[int]]] = []
    for name, port in wanted:
        for device in devices:
            if matches(device, name) and (device, port) not in selected:
                selected.append((device, port))
    return selected


def _in_range(address: str, addr_range: str) -> bool:
    if not addr_range:
        return True
    try:
        return ipaddress.IPv4Address(address) in ipaddress.IPv4Network(addr_range, strict=False)
    except ValueError:
        return False


def init_problem(env: Mapping[str, str], root: Optional[str] = None) -> Optional[str]:
    """NCCL's IB init failure for this rank's environment (the "Last error" line), or None when it would come up."""
    hca = env.get('NCCL_IB_HCA', '').strip()
    if not hca or env.get('NCCL_IB_DISABLE', '').strip() == '1':
        return None
    net = env.get('NCCL_NET', '').strip()
    if net and net.upper() != 'IB':
        return None
    root = root or sysfs_root(env)
    devices = read_devices(root)
    selected = select_devices(hca, devices)
    if not selected:
        return ('NET/IB : No device found for NCCL_IB_HCA=%s (devices under %s: %s)'
                % (hca, os.path.join(root, 'class', 'infiniband'), ', '.join(devices) or 'none'))
    raw_index = env.get('NCCL_IB_GID_INDEX')
    if raw_index is None:
        index = -1
    elif not raw_index.strip():
        index = 0  # NCCL reads an empty value as 0
    else:
        try:
            index = int(raw_index.strip())
        except ValueError:
            return 'NET/IB : NCCL_IB_GID_INDEX=%r is not an integer' % raw_index
    version = 'v' + (env.get('NCCL_IB_ROCE_VERSION_NUM', '').strip() or '2')
    addr_range = env.get('NCCL_IB_ADDR_RANGE', '').strip()
    host_ip = env.get('VLLM_HOST_IP', '').strip()
    carried: List[str] = []
    for device, only_port in selected:
        ports = devices[device]
        if only_port is not None and only_port not in ports:
            return 'NET/IB : %s has no port %d (NCCL_IB_HCA=%s)' % (device, only_port, hca)
        usable = [p for p in sorted(ports) if only_port in (None, p)]
        active = [p for p in usable if ports[p]['state'] == 'ACTIVE' and ports[p]['link_layer'] in ('Ethernet', '')]
        if not active:
            return ('NET/IB : %s: no ACTIVE Ethernet port (%s); NCCL_IB_HCA=%s'
                    % (device, ', '.join('port %d %s' % (p, ports[p]['state']) for p in usable) or 'no ports', hca))
        for port in active:
            port_dir = str(ports[port]['dir'])
            if index >= 0:
                gid, kind, ndev = gid_at(port_dir, index)
                if gid is None:
                    return ('NET/IB : ibv_query_gid failed for %s port %d GID index %d: Invalid argument (no such GID slot)'
                            % (device, port, index))
                address = _ipv4(gid)
                if gid in ZERO_GIDS or not address or _version(kind) != version:
                    return ('NET/IB : ibv_modify_qp failed with 22 Invalid argument, %s port %d local GID index %d is %s '
                            '(%s%s), not a RoCE %s IPv4 GID; NCCL_IB_GID_INDEX=%s is stale or wrong for this node'
                            % (device, port, index, gid, kind or 'no type', ', ' + ndev if ndev else '', version, raw_index))
                carried.append(address)
            else:
                found = None
                for slot in _numbers(os.path.join(port_dir, 'gids')):
                    gid, kind, _ndev = gid_at(port_dir, int(slot))
                    address = _ipv4(gid or '')
                    if address and _version(kind) == version and _in_range(address, addr_range):
                        found = address
                        break
                if found is None:
                    return ('NET/IB : no RoCE %s IPv4 GID%s on %s port %d to select (NCCL_IB_GID_INDEX unset)'
                            % (version, ' in %s' % addr_range if addr_range else '', device, port))
                carried.append(found)
    if host_ip and host_ip not in carried:
        return ('NET/IB : ibv_modify_qp failed with 22 Invalid argument: the GIDs at index %s on %s carry %s, not '
                'VLLM_HOST_IP %s (the peer cannot reach this rank); NCCL_IB_GID_INDEX is stale or wrong for this node'
                % (raw_index if raw_index is not None else 'auto', ','.join(d for d, _p in selected), ', '.join(carried), host_ip))
    return None


def failure_lines(problem: str, rank: int) -> List[str]:
    """What a rank prints when NCCL init fails: NCCL's WARN line, then torch's DistBackendError (seed 003)."""
    pid = os.getpid()
    host = socket.gethostname()
    return [
        '%s:%d:%d [%d] transport/net_ib.cc:1099 NCCL WARN %s' % (host, pid, pid, rank, problem),
        'torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, '
        'unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version %s' % NCCL_VERSION,
        'ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.',
        'Last error:',
        problem,
    ]
