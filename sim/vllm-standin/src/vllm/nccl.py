"""What NCCL's IB transport checks at communicator init over RoCE, against the node's live sysfs tree.

The real engine creates its NCCL communicator once every rank has joined the
rendezvous. Over RoCE, NCCL opens the devices of ``NCCL_IB_HCA`` (``=dev,dev``
exact, ``dev:port``, a prefix list, or ``^`` to exclude), uses only their
ACTIVE Ethernet ports, and addresses each queue pair with one GID per port,
chosen the way NCCL 2.27.7 does (NVIDIA/nccl tag v2.27.7-1, commit
593de54e52679b51428571c13271e2ea9f91b1b1; unchanged in v2.30.7-1; quoted in
sim/SOURCES.md, "vLLM stand-in: NCCL"):

* ``NCCL_PARAM(IbGidIndex, "IB_GID_INDEX", -1)`` (src/transport/net_ib.cc) is
  read by ``ncclLoadParam`` (src/misc/param.cc): ``if (str && strlen(str) > 0)
  value = strtoll(str, nullptr, 0)``, else the default. An EMPTY value is
  therefore the same as an unset one: -1, auto-selection. It is not index 0
  (that was true only before NCCL 2.21, whose default was 0). Any other text is
  strtoll's: ``" 3"`` and ``"3abc"`` are 3, ``"0x3"`` is 3, ``"010"`` is 8,
  ``"three"`` and ``" "`` are 0 (no digits, errno stays 0); only an overflow
  (ERANGE) falls back to the default. ``IB_ROCE_VERSION_NUM`` (default 2) is
  read the same way.
* ``ncclIbGetGidIndex``: an index >= 0 is used as given. Otherwise (auto) it
  starts at index 0 and walks ``1 .. gid_tbl_len-1`` with
  ``ncclUpdateGidIndex``: a candidate of the wanted address family
  (``NCCL_IB_ADDR_FAMILY``, exactly ``AF_INET`` or ``AF_INET6``, anything else
  or empty = AF_INET) whose current pick is of the other family is taken
  outright when it is within ``NCCL_IB_ADDR_RANGE`` (``addr/len``; no ``/``, an
  address that does not parse or a length over 32 (128) = no range); a
  candidate of the same family as the pick is taken only when it is a valid
  GID (not zero, not link-local fe80::/64), in range, of RoCE version
  ``NCCL_IB_ROCE_VERSION_NUM`` and the pick is of another version or not
  valid. On a Spark table (0/1 link-local v1/v2, then a v1/v2 pair per
  address) that is the FIRST RoCE v2 IPv4 GID of the port: not necessarily the
  one carrying the fabric address (another address of the netdev may come
  first), and it may differ per node. With none, the pick stays at index 0,
  the link-local GID.

A stale or wrong GID (the GIDs moved at a reboot, an empty slot, a v1 GID or
another address) fails the QP transition, and the rank dies at init with
"unhandled system error" (seed 003).

``init_problem`` returns that failure, or None. It reads the tree the sim's
stand-ins read (``$SPARK_SIM_SYSFS``, else /var/lib/spark-sim/sys):
``class/infiniband/<dev>/ports/<p>/{state,link_layer,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>}``;
``gid_tbl_len`` is the number of ``gids/<i>`` entries. A missing
``gid_attrs/types/<i>`` stands for the kernel's EINVAL on an empty slot, which
``ncclIbRoceGetVersionNum`` ignores (the version stays unknown).

Where NCCL's outcome is not documented the stand-in takes the worst case: a
device that is absent, or has no ACTIVE port, fails (real NCCL may fall back
to sockets); the GID used (given or selected) must be a RoCE v<N> IPv4-mapped
GID on an ACTIVE port, and ``VLLM_HOST_IP`` (the rank's primary fabric
address) must be carried by one of the devices' GIDs (the primary rail's
device; a second rail carries its own address), unless it is an address of
the interface the TCP bootstrap runs on (``NCCL_SOCKET_IFNAME``, exact form
``=netdev``): three Sparks on direct cables bootstrap on the RJ45 LAN with
RDMA on the rails, as the DSpark recipe's start-tp3.sh runs them on real
Sparks (sim/SOURCES.md, "VLLM_HOST_IP on the bootstrap network"). It checks nothing when
``NCCL_IB_HCA`` is unset, ``NCCL_IB_DISABLE=1`` or ``NCCL_NET`` names another
transport (no RoCE in play).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
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


INT64_MAX = (1 << 63) - 1
AF_INET, AF_INET6 = 'AF_INET', 'AF_INET6'


def c_strtoll(text: str) -> Tuple[int, bool]:
    """glibc ``strtoll(text, NULL, 0)``: (value, overflowed). No digits gives 0 without an error."""
    i, n = 0, len(text)
    while i < n and text[i] in ' \t\n\v\f\r':
        i += 1
    sign = 1
    if i < n and text[i] in '+-':
        sign = -1 if text[i] == '-' else 1
        i += 1
    base = 10
    if text[i:i + 2].lower() == '0x' and i + 2 < n and text[i + 2] in '0123456789abcdefABCDEF':
        base, i = 16, i + 2
    elif text[i:i + 1] == '0':
        base = 8
    digits = ''
    while i < n and text[i].lower() in '0123456789abcdef'[:base]:
        digits += text[i]
        i += 1
    value = sign * int(digits, base) if digits else 0
    if value > INT64_MAX or value < -INT64_MAX - 1:
        return value, True
    return value, False


def nccl_param(env: Mapping[str, str], name: str, default: int) -> int:
    """``ncclLoadParam``: unset or EMPTY gives the default, else strtoll (an overflow gives the default)."""
    text = env.get(name)
    if text is None or len(text) == 0:
        return default
    value, overflow = c_strtoll(text)
    return default if overflow else value


def c_strtol10(text: str) -> int:
    """``strtol(text, NULL, 10)`` for a prefix length: leading blanks, a sign, decimal digits."""
    body = text.lstrip(' \t\n\v\f\r')
    sign = -1 if body[:1] == '-' else 1
    body = body[1:] if body[:1] in '+-' else body
    digits = body[:len(body) - len(body.lstrip('0123456789'))]
    return sign * int(digits) if digits else 0


def addr_family(env: Mapping[str, str]) -> str:
    """``envIbAddrFamily``: exactly AF_INET6 gives AF_INET6; anything else, empty or unset, AF_INET."""
    return AF_INET6 if env.get('NCCL_IB_ADDR_FAMILY', '') == AF_INET6 else AF_INET


def addr_range(env: Mapping[str, str], family: str) -> Optional[Tuple[bytes, int]]:
    """``envIbAddrRange``: (address bytes, prefix length) or None (no range: every GID matches)."""
    text = env.get('NCCL_IB_ADDR_RANGE', '')[:127]
    if not text or '/' not in text:
        return None
    address, _slash, mask = text.partition('/')
    try:
        packed = ipaddress.IPv4Address(address).packed if family == AF_INET else ipaddress.IPv6Address(address).packed
    except ValueError:
        return None
    length = c_strtol10(mask)
    if length > (32 if family == AF_INET else 128):
        return None
    return packed, length


def _raw(gid: Optional[str]) -> bytes:
    try:
        return ipaddress.IPv6Address(gid or '').packed
    except ValueError:
        return bytes(16)


def gid_family(raw: bytes) -> str:
    """``getGidAddrFamily``: IPv4-mapped (or ff0e::ffff:a.b.c.d multicast) is AF_INET, anything else AF_INET6."""
    mapped = raw[:10] == bytes(10) and raw[10:12] == b'\xff\xff'
    mapped_mc = raw[:4] == b'\xff\x0e\x00\x00' and raw[4:10] == bytes(6) and raw[10:12] == b'\xff\xff'
    return AF_INET if (mapped or mapped_mc) else AF_INET6


def gid_valid(raw: bytes) -> bool:
    """``validGid``: configured (not zero, not fe80:: with a zero trailer) and not link-local (fe80::/64)."""
    trailer_zero = raw[4:] == bytes(12)
    configured = not ((raw[:4] == bytes(4) and trailer_zero) or (raw[:4] == b'\xfe\x80\x00\x00' and trailer_zero))
    link_local = raw[:4] == b'\xfe\x80\x00\x00' and raw[4:8] == bytes(4)
    return configured and not link_local


def match_prefix(family: str, prefix: Optional[Tuple[bytes, int]], raw: bytes) -> bool:
    """``matchGidAddrPrefix``: AF_INET compares the last 32 bits of the GID, AF_INET6 the whole GID."""
    if prefix is None:
        return True
    base, length = prefix
    if length <= 0:
        return length == 0          # a negative length never reaches 0: nothing matches
    if family == AF_INET:
        mask = (0xFFFFFFFF ^ ((1 << (32 - length)) - 1)) & 0xFFFFFFFF
        return (int.from_bytes(base, 'big') & mask) == (int.from_bytes(raw[12:16], 'big') & mask)
    mask = ((1 << 128) - 1) ^ ((1 << (128 - length)) - 1)
    return (int.from_bytes(base, 'big') & mask) == (int.from_bytes(raw, 'big') & mask)


def roce_version(port_dir: str, index: int) -> Optional[int]:
    """``ncclIbRoceGetVersionNum``: 1, 2, or None when the type is unreadable (the kernel's EINVAL)."""
    kind = _read(os.path.join(port_dir, 'gid_attrs', 'types', str(index)))
    if kind is None:
        return None
    if kind.startswith('IB/RoCE v1') or kind.startswith('RoCE v1'):
        return 1
    if kind.startswith('RoCE v2'):
        return 2
    return None


def select_gid_index(port_dir: str, env: Mapping[str, str]) -> int:
    """``ncclIbGetGidIndex`` on a RoCE port: the index NCCL uses (given, or auto-selected)."""
    index = nccl_param(env, 'NCCL_IB_GID_INDEX', -1)
    if index >= 0:
        return index
    family = addr_family(env)
    version = nccl_param(env, 'NCCL_IB_ROCE_VERSION_NUM', 2)
    prefix = addr_range(env, family)
    table_len = len(_numbers(os.path.join(port_dir, 'gids')))
    index = 0
    for candidate in range(1, table_len):
        gid = _raw(gid_at(port_dir, index)[0])
        cand = _raw(gid_at(port_dir, candidate)[0])
        cand_family = gid_family(cand)
        in_range = match_prefix(family, prefix, cand)
        if cand_family != gid_family(gid) and cand_family == family and in_range:
            index = candidate
            continue
        if cand_family != family or not gid_valid(cand) or not in_range:
            continue
        if (roce_version(port_dir, index) != roce_version(port_dir, candidate) or not gid_valid(gid)) \
                and roce_version(port_dir, candidate) == version:
            index = candidate
    return index


def interface_ipv4(ifname: str) -> List[str]:
    """The IPv4 addresses of one interface of this node (``ip -o -4 addr show dev IF``), [] when it has none."""
    try:
        proc = subprocess.run(['ip', '-o', '-4', 'addr', 'show', 'dev', ifname], capture_output=True, text=True,
                              check=False, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        words = line.split()
        if 'inet' in words and words.index('inet') + 1 < len(words):
            found.append(words[words.index('inet') + 1].split('/')[0])
    return found


def socket_addresses(env: Mapping[str, str], addresses=interface_ipv4) -> List[str]:
    """The addresses of the interfaces NCCL_SOCKET_IFNAME names exactly (``=a,b``); [] for a prefix or exclude list."""
    value = env.get('NCCL_SOCKET_IFNAME', '').strip()
    if not value.startswith('='):
        return []
    found: List[str] = []
    for name in value[1:].split(','):
        if name.strip():
            found.extend(addresses(name.strip()))
    return found


def init_problem(env: Mapping[str, str], root: Optional[str] = None, addresses=interface_ipv4) -> Optional[str]:
    """NCCL's IB init failure for this rank's environment (the "Last error" line), or None when it would come up.

    ``addresses``: how an interface's IPv4 addresses are read (tests give their own)."""
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
    auto = nccl_param(env, 'NCCL_IB_GID_INDEX', -1) < 0
    how = ('NCCL_IB_GID_INDEX %s, so NCCL selected it (first %s GID of RoCE v%d%s)'
           % ('unset' if raw_index is None else ('empty' if raw_index == '' else '=%r' % raw_index),
              addr_family(env), nccl_param(env, 'NCCL_IB_ROCE_VERSION_NUM', 2),
              ' in %s' % env['NCCL_IB_ADDR_RANGE'] if addr_range(env, addr_family(env)) else '')
           if auto else 'NCCL_IB_GID_INDEX=%s' % raw_index)
    version = 'v%d' % nccl_param(env, 'NCCL_IB_ROCE_VERSION_NUM', 2)
    host_ip = env.get('VLLM_HOST_IP', '').strip()
    carried: List[str] = []
    used: List[str] = []
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
            index = select_gid_index(port_dir, env)
            gid, kind, ndev = gid_at(port_dir, index)
            if gid is None:
                return ('NET/IB : ibv_query_gid failed for %s port %d GID index %d: Invalid argument (no such GID slot)'
                        % (device, port, index))
            address = _ipv4(gid)
            if gid in ZERO_GIDS or not address or _version(kind) != version:
                return ('NET/IB : ibv_modify_qp failed with 22 Invalid argument, %s port %d local GID index %d is %s '
                        '(%s%s), not a RoCE %s IPv4 GID; %s: stale or wrong for this node'
                        % (device, port, index, gid, kind or 'no type', ', ' + ndev if ndev else '', version, how))
            carried.append(address)
            used.append('%s port %d index %d' % (device, port, index))
    if host_ip and host_ip not in carried and host_ip not in socket_addresses(env, addresses):
        return ('NET/IB : ibv_modify_qp failed with 22 Invalid argument: the GIDs used (%s) carry %s, not '
                'VLLM_HOST_IP %s (the peer cannot reach this rank), and it is no address of NCCL_SOCKET_IFNAME %s; '
                '%s: stale or wrong for this node'
                % (', '.join(used), ', '.join(carried), host_ip, env.get('NCCL_SOCKET_IFNAME', '(unset)'), how))
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
