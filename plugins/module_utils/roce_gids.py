# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE GID tables -> NCCL environment, shared by a module and a node-side resolver.

Standard library only, Python 3.8+. The same file runs in two places:

* as ``ansible_collections.dgxspark.cluster.plugins.module_utils.roce_gids``
  inside the ``dgxspark.cluster.roce_gid_facts`` module;
* as a plain ``roce_gids`` module that the nic role installs at
  ``/usr/local/lib/dgxspark/roce_gids.py``, imported by
  ``dgxspark_nccl_resolve.py`` (systemd ExecStartPre of the serving unit).

So it must never import anything from ``ansible``.

The parsing functions are pure (text in, data out). I/O is confined to
``read_sysfs_gids``, ``read_port_states`` and ``write_env_file``.

Port states: NCCL uses only ACTIVE ports, but the kernel keeps a port's GIDs
while its netdev keeps its address, so a port whose cable was pulled still
shows its RoCE GIDs. ``find_rails`` / ``build_nccl_env`` take the states
(``read_port_states``: ``ports/<p>/state`` and ``link_layer``) and skip a port
whose readable state is not ACTIVE (or whose link layer is not Ethernet); a
port whose state cannot be read stays a candidate.

A GID table is a list of ``GidEntry`` dicts::

    {"device": "rocep1s0f0", "port": 1, "index": 3,
     "gid": "0000:0000:0000:0000:0000:ffff:0a00:0001",
     "ipv4": "10.0.0.1", "version": "v2", "netdev": "enp1s0f0np0"}

``ipv4`` is ``""`` when the GID is not IPv4-mapped and ``netdev`` is ``""``
on InfiniBand ports (no Ethernet netdev).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict

__all__ = [
    'GidEntry', 'ParseResult', 'Rail', 'Resolution', 'RoceGidError', 'PortStates',
    'parse_show_gids', 'sysfs_gid_entry', 'read_sysfs_gids', 'ipv4_from_gid',
    'parse_port_state', 'read_port_states', 'port_unusable',
    'summarize_table', 'parse_fabric_ipv4', 'find_rails', 'build_nccl_env',
    'render_env_file', 'parse_env_file', 'write_env_file',
    'NCCL_ENV_KEYS', 'NCCL_AUTO_KEYS',
]


class GidEntry(TypedDict):
    """One row of the GID table (one populated GID of one port)."""

    device: str
    port: int
    index: int
    gid: str
    ipv4: str
    version: str
    netdev: str


class Rail(TypedDict):
    """One fabric address resolved to its RDMA device and RoCE GID indices."""

    ipv4: str
    device: str
    port: int
    netdev: str
    indices: List[int]


class Resolution(TypedDict):
    """Result of ``build_nccl_env``."""

    env: Dict[str, str]
    rails: List[Rail]
    gid_index: Optional[int]
    summary: str


# (device, port) -> {'state': 'ACTIVE' | 'DOWN' | ... | None, 'link_layer': 'Ethernet' | 'InfiniBand' | None};
# None: unreadable (the port stays a candidate).
PortStates = Mapping[Tuple[str, int], Mapping[str, Optional[str]]]


class ParseResult:
    """What ``parse_show_gids`` found.

    ``entries``: the GID rows, in the order the text lists them.
    ``n_gids_found``: the trailer count, or None when the trailer is missing.
    ``problems``: human readable notes (wrapped/unknown lines, redacted GIDs,
    count mismatch). Problems never raise: the caller decides.
    ``unrecognised``: number of non-blank lines that were neither header,
    separator, trailer nor (part of) a row.
    ``text_lines``: number of non-blank lines seen.
    """

    def __init__(self, entries: List[GidEntry], n_gids_found: Optional[int], problems: List[str],
                 unrecognised: int, text_lines: int) -> None:
        self.entries = entries
        self.n_gids_found = n_gids_found
        self.problems = problems
        self.unrecognised = unrecognised
        self.text_lines = text_lines

    @property
    def parseable(self) -> bool:
        """True unless the text had content and none of it looked like show_gids output."""
        return bool(self.entries) or self.n_gids_found is not None or self.text_lines == 0 or self.unrecognised < self.text_lines

    def __repr__(self) -> str:
        return 'ParseResult(entries=%d, n_gids_found=%r, problems=%r)' % (len(self.entries), self.n_gids_found, self.problems)


class RoceGidError(Exception):
    """Resolution failed. ``msg`` names the fabric address(es) and lists what was found, with a hint."""

    def __init__(self, msg: str, fabric_ipv4: Sequence[str] = (), found: str = '') -> None:
        super().__init__(msg)
        self.msg = msg
        self.fabric_ipv4 = list(fabric_ipv4)
        self.found = found


# ---------------------------------------------------------------------------
# token shapes

_HEX_OR_X = r'[0-9A-Fa-fXx]{4}'
_GID_FULL_RE = re.compile(r'^%s(?::%s){7}$' % (_HEX_OR_X, _HEX_OR_X))
_GID_LOOSE_REDACTED_RE = re.compile(r'^[0-9A-Fa-fXx:]*[Xx][0-9A-Fa-fXx:]*$')
_IPV4_RE = re.compile(r'^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$')
_IPV4_REDACTED_RE = re.compile(r'^[\dXx*]{1,3}(?:\.[\dXx*]{1,3}){3}$')
_INT_RE = re.compile(r'^\d{1,6}$')
_DEVICE_RE = re.compile(r'^[A-Za-z][A-Za-z0-9_.\-]*$')
_NETDEV_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.\-:@]*$')
_VERSION_RE = re.compile(r'^(?:(?:IB/)?RoCE)?[-_]?v([12])$', re.IGNORECASE)
_VERSION_PREFIX = ('roce', 'ib/roce')
_TRAILER_RE = re.compile(r'(?:^|\s)n_gids_found\s*[=:]\s*(\d+)', re.IGNORECASE)
_COMMENT_CHARS = '#>|;*'
_INVISIBLE = dict.fromkeys(map(ord, '\u200b\u200c\u200d\u2060\ufeff\r'), None)
_ANSI_RE = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')
_NULL_GIDS = ('0000:0000:0000:0000:0000:0000:0000:0000', 'fe80:0000:0000:0000:0000:0000:0000:0000')
_HEADER_WORDS = frozenset(('DEV', 'PORT', 'INDEX', 'GID', 'IPV4', 'VER'))


def _is_gid(token: str) -> bool:
    if _GID_FULL_RE.match(token):
        return True
    if token.count(':') >= 2 and _GID_LOOSE_REDACTED_RE.match(token):
        return True  # redacted, possibly compressed
    if token.count(':') >= 2:
        try:
            ipaddress.IPv6Address(token)
        except ValueError:
            return False
        return True
    return False


def _normalize_gid(token: str) -> str:
    token = token.lower()
    if 'x' in token or _GID_FULL_RE.match(token):
        return token
    # eight 4-digit groups from the 16 bytes: IPv6Address.exploded writes an IPv4-mapped address's tail
    # dotted (0000:...:ffff:10.0.0.1) from Python 3.13 on, where show_gids and sysfs write 0a00:0001
    packed = ipaddress.IPv6Address(token).packed.hex()
    return ':'.join(packed[i:i + 4] for i in range(0, 32, 4))


def _is_redacted(token: str) -> bool:
    return 'x' in token.lower() or '*' in token


def _is_ipv4(token: str) -> bool:
    match = _IPV4_RE.match(token)
    if match:
        return all(int(octet) <= 255 for octet in match.groups())
    return bool(_IPV4_REDACTED_RE.match(token)) and _is_redacted(token)


def _version_of(tokens: Sequence[str], pos: int) -> Tuple[Optional[str], int]:
    """Return (``'v1'``/``'v2'``, tokens consumed) for a version at ``tokens[pos]``.

    Accepts ``v2``, ``V2``, ``RoCEv2``, ``RoCE v2`` and ``IB/RoCE v1`` (sysfs wording),
    with a glued trailing period (``v1.``).
    """
    if pos >= len(tokens):
        return None, 0
    token = tokens[pos].rstrip('.')
    match = _VERSION_RE.match(token)
    if match:
        return 'v' + match.group(1), 1
    if token.lower() in _VERSION_PREFIX and pos + 1 < len(tokens):
        match = re.match(r'^v([12])$', tokens[pos + 1].rstrip('.'), re.IGNORECASE)
        if match:
            return 'v' + match.group(1), 2
    return None, 0


def ipv4_from_gid(gid: str) -> str:
    """IPv4 address of an IPv4-mapped GID, else ``""``.

    >>> ipv4_from_gid('0000:0000:0000:0000:0000:ffff:c0a8:d3f2')
    '192.168.211.242'
    >>> ipv4_from_gid('fe80:0000:0000:0000:0ac0:ebff:fe21:03da')
    ''
    """
    if _is_redacted(gid):
        return ''
    try:
        address = ipaddress.IPv6Address(gid)
    except ValueError:
        return ''
    mapped = address.ipv4_mapped
    return str(mapped) if mapped is not None else ''


def _tokens(line: str) -> List[str]:
    """Split one physical line on any whitespace (tabs, spaces, NBSP), dropping comment/quote prefixes."""
    tokens = [token for token in line.translate(_INVISIBLE).split() if token.strip('|')]  # '|' of markdown tables
    while tokens and tokens[0].strip(_COMMENT_CHARS) == '':
        tokens.pop(0)
    if tokens:
        tokens[0] = tokens[0].lstrip(_COMMENT_CHARS)
    return tokens


def _is_header(tokens: Sequence[str]) -> bool:
    words = set(token.upper() for token in tokens)
    return 'GID' in words and len(words & _HEADER_WORDS) >= 3


def _is_separator(tokens: Sequence[str]) -> bool:
    return all(set(token) <= set('-=_|:+') for token in tokens)


def _starts_row(tokens: Sequence[str]) -> bool:
    """A row begins with ``<device> <port>`` (device name, then an integer)."""
    return (len(tokens) >= 2 and bool(_DEVICE_RE.match(tokens[0])) and _version_of(tokens, 0)[0] is None
            and bool(_INT_RE.match(tokens[1])))


def _gid_position(tokens: Sequence[str]) -> int:
    for pos, token in enumerate(tokens):
        if _is_gid(token):
            return pos
    return -1


def _row_state(tokens: Sequence[str]) -> str:
    """``'incomplete'`` (no GID or no version yet), ``'complete'`` or ``'complete+netdev'``."""
    gpos = _gid_position(tokens)
    if gpos < 0:
        return 'incomplete'
    pos = gpos + 1
    if pos < len(tokens) and _is_ipv4(tokens[pos]):
        pos += 1
    version, used = _version_of(tokens, pos)
    if version is None:
        return 'incomplete'
    return 'complete+netdev' if pos + used < len(tokens) else 'complete'


def _parse_row(tokens: Sequence[str], where: str, problems: List[str]) -> Optional[GidEntry]:
    """Recognise ``DEV PORT INDEX GID [IPv4] VER [NETDEV]`` by token shape."""
    gpos = _gid_position(tokens)
    if gpos < 3:
        problems.append('%s: not a GID row: %s' % (where, ' '.join(tokens)))
        return None
    device, port, index = tokens[gpos - 3], tokens[gpos - 2], tokens[gpos - 1]
    if not (_DEVICE_RE.match(device) and _INT_RE.match(port) and _INT_RE.match(index)):
        problems.append('%s: expected <device> <port> <index> before the GID: %s' % (where, ' '.join(tokens)))
        return None
    if gpos > 3:
        problems.append('%s: ignored leading text %r' % (where, ' '.join(tokens[:gpos - 3])))
    gid = _normalize_gid(tokens[gpos])
    pos = gpos + 1
    printed_ipv4 = ''
    if pos < len(tokens) and _is_ipv4(tokens[pos]):
        printed_ipv4 = tokens[pos]
        pos += 1
    version, used = _version_of(tokens, pos)
    if version is None:
        problems.append('%s: GID row without a RoCE version (v1/v2), skipped: %s' % (where, ' '.join(tokens)))
        return None
    pos += used
    netdev = ''
    if pos < len(tokens):
        candidate = tokens[pos].rstrip('.')
        if _NETDEV_RE.match(candidate):
            netdev = candidate
            pos += 1
    if pos < len(tokens):
        problems.append('%s: ignored trailing text %r' % (where, ' '.join(tokens[pos:])))
    ipv4 = ipv4_from_gid(gid)
    if _is_redacted(gid):
        problems.append('%s: GID of %s port %s index %s is redacted (%s); it can only match by its printed IPv4'
                        % (where, device, port, index, gid))
        ipv4 = '' if _is_redacted(printed_ipv4) else printed_ipv4
    elif printed_ipv4 and printed_ipv4 != ipv4:
        problems.append('%s: printed IPv4 %s does not match GID %s; using %s' % (where, printed_ipv4, gid, ipv4 or 'none'))
    return GidEntry(device=device, port=int(port), index=int(index), gid=gid, ipv4=ipv4,
                    version=version, netdev=netdev)


def parse_show_gids(text: str) -> ParseResult:
    """Parse the output of Mellanox/mlnx-tools ``show_gids``, as captured or pasted.

    The tool prints (tab separated; ``IPv4`` is followed by two spaces, or one)::

        DEV     PORT    INDEX   GID                                     IPv4            VER     DEV
        ---     ----    -----   ---                                     ------------    ---     ---
        mlx5_0  1       0       fe80:0000:0000:0000:0ac0:ebff:fe21:03da                 v1      rdma0
        mlx5_0  1       3       0000:0000:0000:0000:0000:ffff:c0a8:d3f2 192.168.211.242 v2      rdma0
        mlx5_5  1       0       fe80:0000:0000:0000:08c0:eb03:00ea:50de                 v1
        n_gids_found=3

    Lines are split on any whitespace (tabs, spaces, NBSP) and every token is
    recognised by its shape, never by column: a GID (8 groups of 4 hex
    digits, ``x`` allowed for redaction), preceded by device, port and index,
    followed by an optional IPv4, the version and an optional netdev (empty on
    InfiniBand ports). Tolerated: CRLF, indentation, comment/quote prefixes
    (``# ``, ``> ``), header and dashes lines anywhere, a missing trailer, a
    trailing period glued to the last token, rows wrapped over several lines
    by mail clients, text around the table (reported in ``problems``),
    markdown table pipes, ANSI colour codes, and output whose tabs and
    newlines were pasted as literal ``\\t`` / ``\\n`` escapes (JSON strings).
    """
    text = _ANSI_RE.sub('', text)
    result = _parse_lines(text)
    if not result.entries and ('\\t' in text or '\\n' in text):
        unescaped = _parse_lines(text.replace('\\r', '').replace('\\n', '\n').replace('\\t', '\t'))
        if unescaped.entries:
            unescaped.problems.insert(0, 'the text had literal \\t / \\n escapes (a JSON string?); decoded them')
            return unescaped
    return result


def _parse_lines(text: str) -> ParseResult:
    entries = []  # type: List[GidEntry]
    problems = []  # type: List[str]
    n_gids_found = None  # type: Optional[int]
    unrecognised = 0
    text_lines = 0
    pending = []  # type: List[str]
    pending_lines = []  # type: List[int]
    pending_soft_wrap = False

    def flush() -> None:
        nonlocal unrecognised
        if not pending:
            return
        where = 'line %s' % '+'.join(str(n) for n in pending_lines)
        before = len(problems)
        entry = _parse_row(pending, where, problems)
        if entry is None:
            unrecognised += len(pending_lines)
            if len(problems) == before:  # pragma: no cover - _parse_row always explains
                problems.append('%s: not understood' % where)
        else:
            entries.append(entry)
        del pending[:]
        del pending_lines[:]

    for lineno, raw in enumerate(text.splitlines(), 1):
        raw = raw.translate(_INVISIBLE)
        tokens = _tokens(raw)
        if not tokens:
            continue
        text_lines += 1
        soft_wrap = raw != raw.rstrip()
        trailer = _TRAILER_RE.search(' '.join(tokens))
        if trailer:
            flush()
            if n_gids_found is not None and n_gids_found != int(trailer.group(1)):
                problems.append('line %d: second n_gids_found trailer (%s, first said %s)' % (lineno, trailer.group(1), n_gids_found))
            n_gids_found = int(trailer.group(1))
            continue
        unnumbered = tokens[1:] if len(tokens) > 1 and _INT_RE.match(tokens[0]) else tokens  # cat -n, editors
        if _is_header(unnumbered) or _is_separator(unnumbered):
            flush()
            continue
        if pending:
            state = _row_state(pending)
            row_like = _gid_position(pending) >= 0 or _starts_row(pending)
            continues = False
            if not _starts_row(tokens) and row_like:
                if state == 'incomplete':
                    continues = True
                elif (state == 'complete' and pending_soft_wrap and len(tokens) == 1
                      and _NETDEV_RE.match(tokens[0].rstrip('.')) and not _is_gid(tokens[0])):
                    continues = True
            if continues:
                pending.extend(tokens)
                pending_lines.append(lineno)
                pending_soft_wrap = soft_wrap
                continue
            flush()
        pending.extend(tokens)
        pending_lines.append(lineno)
        pending_soft_wrap = soft_wrap
    flush()

    if n_gids_found is not None and n_gids_found != len(entries):
        problems.append('n_gids_found=%d but %d GID rows were parsed' % (n_gids_found, len(entries)))
    return ParseResult(entries, n_gids_found, problems, unrecognised, text_lines)


# ---------------------------------------------------------------------------
# sysfs

def sysfs_gid_entry(device: str, port: str, index: str, gid: str, gid_type: Optional[str],
                    ndev: Optional[str]) -> Optional[GidEntry]:
    """Build a ``GidEntry`` from the sysfs files of one GID slot, like ``show_gids`` does.

    ``<root>/class/infiniband/<device>/ports/<port>/gids/<index>`` holds the GID
    (``0000:0000:0000:0000:0000:ffff:0a00:0001``), ``gid_attrs/types/<index>``
    holds ``IB/RoCE v1`` or ``RoCE v2`` (unreadable on IB ports and empty slots
    -> None), ``gid_attrs/ndevs/<index>`` the netdev (None when absent).
    Returns None for empty slots (all-zero GID or all-zero link-local GID).

    >>> sysfs_gid_entry('mlx5_0', '1', '3', '0000:0000:0000:0000:0000:ffff:c0a8:d3f2\\n', 'RoCE v2\\n', 'rdma0\\n')['ipv4']
    '192.168.211.242'
    """
    gid = gid.strip().lower()
    if not gid or gid in _NULL_GIDS or not _is_gid(gid):
        return None
    gid = _normalize_gid(gid)
    version = 'v1'
    type_tokens = (gid_type or '').split()
    if type_tokens:
        version_found, _used = _version_of(type_tokens, len(type_tokens) - 1)
        if version_found:
            version = version_found
    return GidEntry(device=device, port=int(port), index=int(index), gid=gid, ipv4=ipv4_from_gid(gid),
                    version=version, netdev=(ndev or '').strip())


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, 'r') as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def _numeric_names(path: str) -> List[str]:
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted((name for name in names if name.isdigit()), key=int)


def read_sysfs_gids(sysfs_root: str = '/sys') -> List[GidEntry]:
    """Read every populated GID under ``<sysfs_root>/class/infiniband`` (the same table ``show_gids`` prints).

    Devices are sorted by name, ports and indices numerically. A missing
    ``class/infiniband`` directory gives an empty table.
    """
    base = os.path.join(sysfs_root, 'class', 'infiniband')
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return []
    entries = []  # type: List[GidEntry]
    for device in devices:
        ports_dir = os.path.join(base, device, 'ports')
        for port in _numeric_names(ports_dir):
            port_dir = os.path.join(ports_dir, port)
            for index in _numeric_names(os.path.join(port_dir, 'gids')):
                gid = _read_text(os.path.join(port_dir, 'gids', index))
                if gid is None:
                    continue
                entry = sysfs_gid_entry(device, port, index, gid,
                                        _read_text(os.path.join(port_dir, 'gid_attrs', 'types', index)),
                                        _read_text(os.path.join(port_dir, 'gid_attrs', 'ndevs', index)))
                if entry is not None:
                    entries.append(entry)
    return entries


def parse_port_state(text: Optional[str]) -> Optional[str]:
    """The state name of a sysfs ``ports/<p>/state`` file, None when unreadable or empty.

    >>> parse_port_state('4: ACTIVE\\n')
    'ACTIVE'
    >>> parse_port_state('1: DOWN')
    'DOWN'
    >>> parse_port_state(None) is None
    True
    """
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    return text.split(':', 1)[-1].strip().upper() or None


def read_port_states(sysfs_root: str = '/sys') -> Dict[Tuple[str, int], Dict[str, Optional[str]]]:
    """``{(device, port): {'state': ..., 'link_layer': ...}}`` for every port under ``<sysfs_root>/class/infiniband``.

    ``state`` is the name in ``ports/<p>/state`` (``ACTIVE``, ``DOWN``, ``INIT``...), ``link_layer``
    the text of ``ports/<p>/link_layer`` (``Ethernet``, ``InfiniBand``); either is None when it cannot
    be read. A missing tree gives an empty mapping (every port then stays a candidate).
    """
    base = os.path.join(sysfs_root, 'class', 'infiniband')
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return {}
    states = {}  # type: Dict[Tuple[str, int], Dict[str, Optional[str]]]
    for device in devices:
        ports_dir = os.path.join(base, device, 'ports')
        for port in _numeric_names(ports_dir):
            link_layer = _read_text(os.path.join(ports_dir, port, 'link_layer'))
            states[(device, int(port))] = {
                'state': parse_port_state(_read_text(os.path.join(ports_dir, port, 'state'))),
                'link_layer': (link_layer or '').strip() or None,
            }
    return states


def port_unusable(port_states: Optional[PortStates], device: str, port: int) -> str:
    """Why NCCL would not use ``device`` ``port`` for RoCE (``'state DOWN'``, ``'link layer InfiniBand'``), ``''`` when it would.

    A port absent from ``port_states``, or whose state / link layer is unreadable, is usable.
    """
    info = (port_states or {}).get((device, int(port))) or {}
    state = info.get('state')
    if state is not None and state != 'ACTIVE':
        return 'state %s' % state
    link_layer = info.get('link_layer')
    if link_layer is not None and link_layer != 'Ethernet':
        return 'link layer %s' % link_layer
    return ''


# ---------------------------------------------------------------------------
# resolution

NCCL_ENV_KEYS = ('NCCL_IB_HCA', 'NCCL_IB_GID_INDEX', 'NCCL_SOCKET_IFNAME', 'GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'VLLM_HOST_IP')
NCCL_AUTO_KEYS = ('NCCL_IB_ADDR_FAMILY', 'NCCL_IB_ROCE_VERSION_NUM', 'NCCL_IB_ADDR_RANGE')


def summarize_table(entries: Sequence[GidEntry]) -> str:
    """One line describing a GID table for error messages.

    >>> summarize_table([])
    'no GIDs at all (no RDMA device, or its driver is not loaded: see ibdev2netdev / ibstat)'
    """
    if not entries:
        return 'no GIDs at all (no RDMA device, or its driver is not loaded: see ibdev2netdev / ibstat)'
    ports = {}  # type: Dict[Tuple[str, int], List[GidEntry]]
    for entry in entries:
        ports.setdefault((entry['device'], entry['port']), []).append(entry)
    parts = []
    for (device, port), rows in ports.items():
        netdevs = sorted(set(row['netdev'] for row in rows if row['netdev']))
        label = '%s port %d (%s)' % (device, port, ', '.join(netdevs) if netdevs else 'no netdev: InfiniBand?')
        by_ip = {}  # type: Dict[str, List[str]]
        for row in rows:
            if row['ipv4']:
                by_ip.setdefault(row['ipv4'], []).append('%s idx %d' % (row['version'], row['index']))
        if by_ip:
            label += ': ' + ', '.join('%s [%s]' % (ip, ', '.join(found)) for ip, found in by_ip.items())
        else:
            versions = sorted(set(row['version'] for row in rows))
            label += ': no IPv4 GID (%s only)' % '/'.join(versions)
        redacted = [row for row in rows if _is_redacted(row['gid'])]
        if redacted:
            label += ', %d redacted GID(s)' % len(redacted)
        parts.append(label)
    return '%d GID(s) on %d port(s): %s' % (len(entries), len(parts), '; '.join(parts))


def parse_fabric_ipv4(values: Iterable[str]) -> List[Tuple[str, Optional[str]]]:
    """Validate fabric addresses: ``"10.0.0.1"`` or ``"10.0.0.1/24"`` -> ``[("10.0.0.1", "10.0.0.0/24" or None)]``."""
    result = []  # type: List[Tuple[str, Optional[str]]]
    for value in values:
        text = str(value).strip()
        try:
            interface = ipaddress.IPv4Interface(text)
        except ValueError:
            raise RoceGidError('fabric_ipv4 %r is not an IPv4 address' % (value,), fabric_ipv4=[text])
        address = str(interface.ip)
        if any(address == seen for seen, _net in result):
            raise RoceGidError('fabric_ipv4 lists %s twice: give one address per rail' % address, fabric_ipv4=[address])
        result.append((address, str(interface.network) if '/' in text else None))
    if not result:
        raise RoceGidError('fabric_ipv4 is empty: give the host address on the RoCE fabric (one per rail)')
    return result


def _hca_names(hca: Optional[Iterable[str]]) -> List[str]:
    """Device names of an include filter (``dev``, ``=dev``, ``dev:port``, comma lists). NCCL's ``^`` exclude form is refused."""
    names = []  # type: List[str]
    for item in hca or ():
        text = str(item).strip()
        if text.lstrip('=').startswith('^') or ',^' in text.replace(' ', ''):
            raise RoceGidError('hca %r uses NCCL\'s exclude form (^dev): the hca filter lists the devices to use; '
                               'give them (e.g. rocep1s0f1) instead of the ones to leave out' % text)
        for name in text.split(','):
            name = name.strip().lstrip('=').split(':')[0]
            if name:
                names.append(name)
    return names


def _port_gids(entries: Sequence[GidEntry], ports: Sequence[Tuple[str, int]]) -> str:
    """Every GID of ``ports``: ``rocep1s0f1 port 1: idx 0 v1 fe80:..., idx 3 v2 192.168.100.10; ...``."""
    parts = []
    for device, port in ports:
        rows = [row for row in entries if row['device'] == device and row['port'] == port]
        listed = ', '.join('idx %d %s %s' % (row['index'], row['version'], row['ipv4'] or row['gid']) for row in rows)
        parts.append('%s port %d: %s' % (device, port, listed or 'no GIDs'))
    return '; '.join(parts)


def _describe(rows: Sequence[GidEntry]) -> str:
    described = []
    for row in rows:
        netdev = 'netdev ' + row['netdev'] if row['netdev'] else 'no netdev'
        described.append('%s port %d index %d (%s, %s)' % (row['device'], row['port'], row['index'], row['version'], netdev))
    return ', '.join(described)


def _rail_problem(address: str, rows: Sequence[GidEntry], wanted: str, hca: List[str],
                  port_states: Optional[PortStates] = None) -> str:
    """Explain why ``address`` has no usable GID (rows: all GIDs carrying that address)."""
    other = 'v1' if wanted == 'v2' else 'v2'
    if not rows:
        return ('%s: no GID carries this address (link down, address not configured on the RoCE netdev, '
                'or wrong address? check `ip -4 addr`, `ibdev2netdev` and `ibstat`)' % address)
    in_filter = [row for row in rows if not hca or row['device'] in hca]
    if not in_filter:
        return '%s: found only on %s, outside the hca filter %s' % (address, _describe(rows), ','.join(hca))
    versioned = [row for row in in_filter if row['version'] == wanted]
    if not versioned:
        return ('%s: exists only as RoCE %s (%s): the device exposes no RoCE %s GID for this address; '
                'check the NIC firmware and driver and the GID types in sysfs (ports/<port>/gid_attrs/types/<index>)'
                % (address, other, _describe(in_filter), wanted))
    dead = []  # type: List[str]
    for row in versioned:
        why = port_unusable(port_states, row['device'], row['port'])
        label = '%s port %d (netdev %s, %s)' % (row['device'], row['port'], row['netdev'] or '-', why)
        if why and label not in dead:
            dead.append(label)
    if dead:
        return ('%s: found only on %s, which NCCL does not use (ports/<port>/state must be ACTIVE, link_layer Ethernet): '
                'a pulled cable or a link partner that is down keeps the GIDs while the address stays; '
                'check the cable, `ibstat` and `ibdev2netdev`' % (address, ', '.join(dead)))
    return '%s: unusable (%s)' % (address, _describe(in_filter))  # pragma: no cover - callers only pass failing rows


def find_rails(entries: Sequence[GidEntry], fabric_ipv4: Iterable[str], roce_version: str = 'v2',
               hca: Optional[Iterable[str]] = None, port_states: Optional[PortStates] = None) -> List[Rail]:
    """Match each fabric address to the one device/port carrying it as a RoCE ``roce_version`` GID.

    Matching is on the address only (never on index or position). Ports that
    ``port_states`` shows not ACTIVE (or not Ethernet) are no candidates
    (``port_unusable``). Raises ``RoceGidError`` naming every failing address,
    what was found, and a hint.
    """
    wanted = roce_version.lower()
    if wanted not in ('v1', 'v2'):
        raise RoceGidError('roce_version must be v1 or v2, not %r' % roce_version)
    addresses = [address for address, _net in parse_fabric_ipv4(fabric_ipv4)]
    hca_names = _hca_names(hca)
    rails = []  # type: List[Rail]
    failures = []  # type: List[str]
    for address in addresses:
        rows = [row for row in entries if row['ipv4'] == address]
        usable = [row for row in rows if row['version'] == wanted and (not hca_names or row['device'] in hca_names)
                  and not port_unusable(port_states, row['device'], row['port'])]
        ports = []  # type: List[Tuple[str, int]]
        for row in usable:
            if (row['device'], row['port']) not in ports:
                ports.append((row['device'], row['port']))
        if not usable:
            failures.append(_rail_problem(address, rows, wanted, hca_names, port_states))
            continue
        if len(ports) > 1:
            failures.append('%s: carried by several ports (%s); pick one with the hca filter. Every GID on them: %s'
                            % (address, _describe(usable), _port_gids(entries, ports)))
            continue
        device, port = ports[0]
        netdevs = sorted(set(row['netdev'] for row in usable if row['netdev']))
        rails.append(Rail(ipv4=address, device=device, port=port, netdev=netdevs[0] if netdevs else '',
                          indices=sorted(set(row['index'] for row in usable))))
    if failures:
        found = summarize_table(entries)
        raise RoceGidError('no RoCE %s GID for fabric address %s. %s. Found %s'
                           % (wanted, ', '.join(addresses), ' '.join(failures), found),
                           fabric_ipv4=addresses, found=found)
    seen = {}  # type: Dict[Tuple[str, int], str]
    for rail in rails:
        key = (rail['device'], rail['port'])
        if key in seen:
            raise RoceGidError('fabric addresses %s and %s are on the same device %s port %d: give one address per rail'
                               % (seen[key], rail['ipv4'], rail['device'], rail['port']),
                               fabric_ipv4=addresses, found=summarize_table(entries))
        seen[key] = rail['ipv4']
    return rails


def build_nccl_env(entries: Sequence[GidEntry], fabric_ipv4: Iterable[str], roce_version: str = 'v2',
                   hca: Optional[Iterable[str]] = None, nccl_gid_auto: bool = False,
                   socket_ifname: Optional[str] = None, port_states: Optional[PortStates] = None,
                   host_ip: Optional[str] = None) -> Resolution:
    """Table + fabric address(es) -> the NCCL / Gloo / vLLM environment of this host.

    * ``NCCL_IB_HCA``: ``=dev1,dev2`` (exact match; ``dev:port`` when the
      device shows several ports), one device per rail, in rail order.
    * ``NCCL_IB_GID_INDEX``: the RoCE index common to all rails (the lowest if
      several), always written explicitly. Left out, or empty (NCCL >= 2.21's
      ``ncclLoadParam`` reads an empty value as unset; ``IB_GID_INDEX``
      defaults to -1), NCCL selects the GID itself (``ncclIbGetGidIndex``):
      the first GID of each port of family ``NCCL_IB_ADDR_FAMILY`` and RoCE
      version ``NCCL_IB_ROCE_VERSION_NUM`` within ``NCCL_IB_ADDR_RANGE``, else
      index 0 (link-local). That need not be the GID carrying the fabric
      address (another IPv4 address of the netdev may come first) and may
      differ per node; the explicit index is the one that does. NCCL takes a
      single index for every HCA, so rails without a common index raise
      ``RoceGidError`` unless ``nccl_gid_auto`` (used only in that case; a
      common index is always pinned): then the index is left out and NCCL
      selects it (``NCCL_IB_ADDR_FAMILY=AF_INET``,
      ``NCCL_IB_ROCE_VERSION_NUM``, ``NCCL_IB_ADDR_RANGE`` when every rail was
      given with the same ``/prefix``, which steers the selection to the
      fabric subnet). Sources: sim/SOURCES.md, "vLLM stand-in: NCCL".
    * ``NCCL_SOCKET_IFNAME`` (exact form ``=netdev``), ``GLOO_SOCKET_IFNAME``,
      ``TP_SOCKET_IFNAME``: the netdev of the first rail (or ``socket_ifname``).
    * ``VLLM_HOST_IP``: the first fabric address (or ``host_ip``: the node's address on the bootstrap network every
      node reaches, with ``socket_ifname`` its netdev; a triangle of direct cables, plugins/module_utils/topology.py).

    ``port_states`` (``read_port_states``): ports that are not ACTIVE are skipped, as NCCL skips them.
    """
    roce_version = str(roce_version).lower()
    parsed = parse_fabric_ipv4(fabric_ipv4)
    rails = find_rails(entries, [address for address, _net in parsed], roce_version, hca, port_states)
    addresses = [rail['ipv4'] for rail in rails]
    version_num = roce_version.lower().lstrip('v')

    common = set(rails[0]['indices'])
    for rail in rails[1:]:
        common &= set(rail['indices'])
    gid_index = min(common) if common else None
    if gid_index is None and not nccl_gid_auto:
        raise RoceGidError('fabric addresses %s have no common RoCE %s GID index (%s); NCCL takes one NCCL_IB_GID_INDEX for all '
                           'HCAs. Put the addresses at the same index (same address order on every rail), use one rail, or set '
                           'nccl_gid_auto to let NCCL (>= 2.21) select the GID per HCA. Every GID on the rails: %s'
                           % (', '.join(addresses), roce_version,
                              '; '.join('%s on %s port %d: index %s' % (rail['ipv4'], rail['device'], rail['port'],
                                                                        '/'.join(str(i) for i in rail['indices'])) for rail in rails),
                              _port_gids(entries, [(rail['device'], rail['port']) for rail in rails])),
                           fabric_ipv4=addresses, found=summarize_table(entries))

    ifname = (socket_ifname or '').strip().lstrip('=') or rails[0]['netdev']
    if not ifname:
        raise RoceGidError('fabric address %s is on %s port %d, which has no netdev (InfiniBand port?): cannot set the socket '
                           'interface; give socket_ifname' % (rails[0]['ipv4'], rails[0]['device'], rails[0]['port']),
                           fabric_ipv4=addresses, found=summarize_table(entries))

    ports_per_device = {}  # type: Dict[str, set]
    for entry in entries:
        ports_per_device.setdefault(entry['device'], set()).add(entry['port'])
    hcas = []
    for rail in rails:
        name = rail['device']
        if len(ports_per_device.get(name, ())) > 1:
            name = '%s:%d' % (name, rail['port'])
        hcas.append(name)

    env = {'NCCL_IB_HCA': '=' + ','.join(hcas)}  # type: Dict[str, str]
    if gid_index is not None:
        env['NCCL_IB_GID_INDEX'] = str(gid_index)
    else:
        env['NCCL_IB_ADDR_FAMILY'] = 'AF_INET'
        env['NCCL_IB_ROCE_VERSION_NUM'] = version_num
        networks = set(net for _address, net in parsed)
        if len(networks) == 1 and None not in networks:
            env['NCCL_IB_ADDR_RANGE'] = networks.pop()  # type: ignore[assignment]
    env['NCCL_SOCKET_IFNAME'] = '=' + ifname
    env['GLOO_SOCKET_IFNAME'] = ifname
    env['TP_SOCKET_IFNAME'] = ifname
    env['VLLM_HOST_IP'] = (host_ip or '').strip() or rails[0]['ipv4']

    picked = ', '.join('%s -> %s port %d (netdev %s) index %s' % (rail['ipv4'], rail['device'], rail['port'], rail['netdev'] or '-',
                                                                  '/'.join(str(i) for i in rail['indices'])) for rail in rails)
    if gid_index is not None:
        summary = 'RoCE %s GID index %d for %s: %s' % (roce_version, gid_index, env['NCCL_IB_HCA'], picked)
    else:
        summary = 'no common RoCE %s GID index, NCCL selects it (AF_INET) for %s: %s' % (roce_version, env['NCCL_IB_HCA'], picked)
    skipped = []  # type: List[str]
    for entry in entries:
        why = port_unusable(port_states, entry['device'], entry['port'])
        label = '%s port %d (%s)' % (entry['device'], entry['port'], why)
        if why and entry['ipv4'] in addresses and label not in skipped:
            skipped.append(label)
    if skipped:
        summary += '; skipped %s (not used by NCCL)' % ', '.join(skipped)
    return Resolution(env=env, rails=rails, gid_index=gid_index, summary=summary)


# ---------------------------------------------------------------------------
# environment files (systemd EnvironmentFile syntax, also fine for docker --env-file and sh)

_ENV_KEY_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_ENV_SAFE_RE = re.compile(r'^[A-Za-z0-9_.,:/=@+%\-]*$')


def render_env_file(env: Mapping[str, str], header: Optional[str] = None) -> str:
    """Render ``KEY=value`` lines. Values with characters outside ``[A-Za-z0-9_.,:/=@+%-]`` are double-quoted.

    >>> render_env_file({'NCCL_IB_HCA': '=mlx5_0,mlx5_1', 'NCCL_IB_GID_INDEX': '3'})
    'NCCL_IB_HCA==mlx5_0,mlx5_1\\nNCCL_IB_GID_INDEX=3\\n'
    """
    lines = []
    for comment_line in (header or '').splitlines():
        lines.append(('# ' + comment_line).rstrip())
    for key, value in env.items():
        value = str(value)
        if not _ENV_KEY_RE.match(key):
            raise ValueError('invalid environment variable name %r' % key)
        if '\n' in value or '\r' in value or '\0' in value:
            raise ValueError('environment value of %s contains a line break or NUL' % key)
        if not _ENV_SAFE_RE.match(value):
            value = '"%s"' % re.sub(r'(["\\$`])', r'\\\1', value)
        lines.append('%s=%s' % (key, value))
    return '\n'.join(lines) + '\n'


def parse_env_file(text: str) -> Dict[str, str]:
    """Parse ``KEY=value`` lines (``#``/``;`` comments, optional ``export``, single or double quotes).

    >>> parse_env_file('# c\\nNCCL_NET=IB\\nexport A="x y"\\n')
    {'NCCL_NET': 'IB', 'A': 'x y'}
    """
    env = {}  # type: Dict[str, str]
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in '#;':
            continue
        if line.startswith('export '):
            line = line[len('export '):].lstrip()
        key, sep, value = line.partition('=')
        key = key.strip()
        if not sep or not _ENV_KEY_RE.match(key):
            raise ValueError('line %d: expected KEY=value, got %r' % (lineno, line))
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r'\\(["\\$`])', r'\1', value[1:-1])
        env[key] = value
    return env


def write_env_file(path: str, content: str, mode: int = 0o644) -> None:
    """Write ``content`` to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    handle, temp_path = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', dir=directory)
    try:
        with os.fdopen(handle, 'w') as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp_path, mode)
        os.replace(temp_path, path)
    except BaseException:
        try:
            os.unlink(temp_path)
        except OSError:
            pass
        raise
