# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parser for perftest ``ib_write_bw`` output (stdlib only, pure, Python 3.8+).

What the tool prints (perftest src/perftest_parameters.c ctx_print_test_info and
print_full_bw_report, src/perftest_communication.c ctx_print_pingpong_data),
client side of a DGX Spark RoCE run with ``--report_gbits``::

     WARNING: BW peak won't be measured in this run.            (-D, -N, -n > 20000)
    ---------------------------------------------------------------------------------------
                        RDMA_Write BW Test
     Dual-port       : OFF          Device         : rocep1s0f0
     Number of qps   : 1            Transport type : IB
     Connection type : RC           Using SRQ      : OFF
     PCIe relax order: ON
     ibv_wr* API     : ON
     TX depth        : 128
     CQ Moderation   : 1
     Mtu             : 1024[B]
     Link type       : Ethernet
     GID index       : 3
     Max inline data : 0[B]
     rdma_cm QPs     : OFF
     Data ex. method : Ethernet
    ---------------------------------------------------------------------------------------
     local address: LID 0000 QPN 0x0129 PSN 0x57279d RKey 0x184300 VAddr 0x00ec99bedad000
     GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:200:13
     remote address: LID 0000 QPN 0x0129 PSN 0x531b7 RKey 0x184300 VAddr 0x00ffeec955d000
     GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:200:12
    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      882805           0.00               92.57                0.176554
    ---------------------------------------------------------------------------------------

The two-column info lines are separated by two TABs, ``rdma_cm QPs`` by one;
the server prints a ``* Waiting for client to connect... *`` banner first and
no ``TX depth``. Without ``--report_gbits`` the unit is ``MiB/sec`` (perftest
6.22 and later; ``MB/sec`` before, the same 2^20 bytes: Gb/s = MiB/s * 2^20 *
8 / 10^9, perftest's "factor 119.2"); ``unit`` keeps the spelling printed. ``-a``
and ``--run_infinitely`` print one row per size or interval; ``--cpu_util``
adds a sixth column. GID bytes are printed in decimal.

Rows and fields are recognised by their shape, not by column position, so the
parser survives what pastes do: TABs expanded to spaces, CRLF, non-breaking
spaces, indentation, ``#``/``>``/prompt prefixes, a row wrapped before its
MsgRate, a missing closing dashes line.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

__all__ = ['parse_ib_write_bw', 'to_gbps', 'MIB_PER_GB']

# MB/sec in perftest is MiB/s: 10^9 / (2^20 * 8) = 119.2 of them in one Gb/s.
MIB_PER_GB = 1e9 / (1048576 * 8)

_CLEAN = re.compile(u"[\u00a0\u2007\u202f\r\t]")
_PREFIX = re.compile(r"^\s*(?:(?:#|>|\$|%)(?=\s)\s*)+")
_UNIT = re.compile(r"BW\s*average\s*\[\s*(Gb|MiB|MB)\s*/\s*sec\s*\]", re.IGNORECASE)
_PEAK_UNIT = re.compile(r"BW\s*peak\s*\[\s*(Gb|MiB|MB)\s*/\s*sec\s*\]", re.IGNORECASE)
_UNITS = {'gb': 'Gb/sec', 'mib': 'MiB/sec', 'mb': 'MB/sec'}
_INT = re.compile(r"^\d+$")
_FLOAT = re.compile(r"^\d+(?:\.\d+)?$")
_TEST = re.compile(r"^\s*((?:RDMA_Write|RDMA_Read|Send|RDMA_Write_imm|Atomic)[\w ]*?(?:BW|Latency)[\w ]*?Test)\s*$")
_FIELD = re.compile(
    r"(Dual-port|Device|Number of qps|Transport type|Connection type|Using SRQ|PCIe relax order|ibv_wr\* API|"
    r"TX depth|CQ Moderation|Mtu|Link type|GID index|Max inline data|rdma_cm QPs|Data ex\. method)\s*:\s*(\S+)")
_ADDRESS = re.compile(r"\b(local|remote)\s+address\s*:", re.IGNORECASE)
_GID = re.compile(r"^\s*GID\s*:\s*((?:\d{1,3}:){15}\d{1,3})\s*$")
_ERRORS = [
    re.compile(p) for p in (
        r"IB device \S+ not found", r"Did not detect devices", r"Unable to find the Infiniband/RoCE device",
        r"Couldn't connect to \S+", r"Couldn't listen to port \d+", r"Unable to init the socket connection",
        r"Port number \d+ state is \S+", r"Couldn't set the link layer", r"Found Incompatibility issue with GID types",
        r"Failed to modify QP \S+ to RT[RS]", r"Unable to Connect the HCA's through the link",
        r"Couldn't read remote address", r"Failed to exchange data between server and clients",
        r"Invalid Command or flag", r"unrecognized option \S+", r"invalid option -- \S+",
        r"Parser function exited with Error", r"should be between \d+ and \d+", r"[Cc]ommand not found",
        r"No such file or directory",
    )
]
_INFO_KEYS = {
    'Dual-port': 'dual_port', 'Device': 'device', 'Number of qps': 'qps', 'Transport type': 'transport_type',
    'Connection type': 'connection_type', 'Using SRQ': 'using_srq', 'PCIe relax order': 'pcie_relax_order',
    'ibv_wr* API': 'ibv_wr_api', 'TX depth': 'tx_depth', 'CQ Moderation': 'cq_moderation', 'Mtu': 'mtu',
    'Link type': 'link_type', 'GID index': 'gid_index', 'Max inline data': 'max_inline_data',
    'rdma_cm QPs': 'rdma_cm_qps', 'Data ex. method': 'data_exchange_method',
}
_INT_KEYS = ('qps', 'tx_depth', 'cq_moderation', 'mtu', 'gid_index', 'max_inline_data')


def to_gbps(value, unit):
    """A perftest bandwidth figure in Gb/s (10^9 bit/s): ``unit`` is ``Gb/sec``, ``MiB/sec`` or ``MB/sec``.

    ``MB/sec`` (perftest before 6.22) and ``MiB/sec`` (6.22 on, commit 1d202bb "Display proper
    unit for MiB/sec results", March 2024) are the same unit, 2^20 bytes per second.
    """
    if unit == 'Gb/sec':
        return float(value)
    if unit in ('MiB/sec', 'MB/sec'):
        return float(value) / MIB_PER_GB
    raise ValueError("unknown ib_write_bw unit %r (expected 'Gb/sec', 'MiB/sec' or 'MB/sec')" % (unit,))


def _lines(text):
    """Cleaned lines: TAB/NBSP/CR as spaces, comment and prompt prefixes dropped."""
    return [_PREFIX.sub(u"", _CLEAN.sub(u" ", line)).rstrip() for line in text.split(u"\n")]


def _row(tokens):
    """A result row ``#bytes #iterations peak average msgrate [cpu]`` as a dict, or None."""
    if len(tokens) not in (5, 6):
        return None
    if not (_INT.match(tokens[0]) and _INT.match(tokens[1]) and all(_FLOAT.match(t) for t in tokens[2:])):
        return None
    row = {
        'bytes': int(tokens[0]), 'iterations': int(tokens[1]), 'bw_peak': float(tokens[2]),
        'bw_average': float(tokens[3]), 'msg_rate': float(tokens[4]),
    }
    if len(tokens) == 6:
        row['cpu_util'] = float(tokens[5])
    return row


def _rows(lines):
    rows = []
    index = 0
    while index < len(lines):
        tokens = lines[index].split()
        row = _row(tokens)
        if row is None and len(tokens) == 4 and _row(tokens + ['0']) is not None:
            # a row wrapped before its MsgRate (and CPU) column by a mail client
            following = index + 1
            while following < len(lines) and not lines[following].strip():
                following += 1
            if following < len(lines):
                rest = lines[following].split()
                if 1 <= len(rest) <= 2 and all(_FLOAT.match(t) for t in rest):
                    row = _row(tokens + rest)
                    index = following
        if row is not None:
            rows.append(row)
        index += 1
    return rows


def _gid(decimal):
    """``00:...:255:255:192:168:200:13`` (PERF_GID_FMT, decimal bytes) -> (GID text, IPv4 or '')."""
    raw = [int(part) for part in decimal.split(':')]
    if any(part > 255 for part in raw):
        return None, ''
    text = ':'.join('%02x%02x' % (raw[i], raw[i + 1]) for i in range(0, 16, 2))
    ipv4 = '.'.join(str(part) for part in raw[12:]) if raw[:10] == [0] * 10 and raw[10:12] == [255, 255] else ''
    return text, ipv4


def _info(lines, result):
    side = None
    for line in lines:
        test = _TEST.match(line)
        if test and result['test'] is None:
            result['test'] = ' '.join(test.group(1).split())
        for key, value in _FIELD.findall(line):
            name = _INFO_KEYS[key]
            if name in _INT_KEYS:
                number = re.match(r"\d+", value)
                if number is None:
                    continue
                result[name] = int(number.group(0))
            elif result.get(name) is None:
                result[name] = value
        address = _ADDRESS.search(line)
        if address:
            side = address.group(1).lower()
            continue
        gid = _GID.match(line)
        if gid and side and result[side + '_gid'] is None:
            result[side + '_gid'], result[side + '_ipv4'] = _gid(gid.group(1))
        if line.strip().upper().startswith('WARNING'):
            result['warnings'].append(line.strip())
        if 'Waiting for client to connect' in line:
            result['role'] = 'server'


def _error_line(lines):
    for line in lines:
        for pattern in _ERRORS:
            if pattern.search(line):
                return line.strip()
    return None


def parse_ib_write_bw(text, default_unit=None):
    """Parse ib_write_bw output; raise ValueError with a clear message when it holds no result.

    Returns the last result row (the one a single run prints; the largest size
    with ``-a``; the latest interval with ``--run_infinitely``) and the test
    description::

        {'bytes': 65536, 'iterations': 882805, 'bw_peak': 0.0, 'bw_average': 92.57,
         'msg_rate': 0.176554, 'unit': 'Gb/sec', 'gbps_average': 92.57, 'gbps_peak': 0.0,
         'peak_measured': False, 'rows': [...every row...],
         'test': 'RDMA_Write BW Test', 'device': 'rocep1s0f0', 'gid_index': 3, 'link_type': 'Ethernet',
         'mtu': 1024, 'qps': 1, 'connection_type': 'RC', 'transport_type': 'IB', 'tx_depth': 128,
         'cq_moderation': 1, 'data_exchange_method': 'Ethernet', 'rdma_cm_qps': 'OFF', 'role': 'client',
         'local_gid': '0000:0000:0000:0000:0000:ffff:c0a8:c80d', 'local_ipv4': '192.168.200.13',
         'remote_gid': '...', 'remote_ipv4': '192.168.200.12', 'warnings': [...], ...}

    Info fields absent from the text are None (``--output=bandwidth`` prints only
    numbers and is not this format). ``default_unit`` ('Gb/sec' or 'MB/sec') is
    used when the column header is missing; without it a missing header is an error.
    """
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    if text is None or not u"".join(text.split()):
        raise ValueError("ib_write_bw output is empty")
    lines = _lines(text)
    result = {
        'test': None, 'role': 'client', 'local_gid': None, 'local_ipv4': '', 'remote_gid': None, 'remote_ipv4': '',
        'warnings': [],
    }
    for name in _INFO_KEYS.values():
        result[name] = None
    _info(lines, result)
    rows = _rows(lines)
    if not rows:
        error = _error_line(lines)
        first = next((line.strip() for line in lines if line.strip()), '')
        if error:
            raise ValueError("ib_write_bw printed no result row; it reports: %r" % error[:200])
        raise ValueError("ib_write_bw output has no result row (#bytes #iterations BW peak BW average MsgRate) "
                         "in %d non-blank line(s); first line: %r"
                         % (len([line for line in lines if line.strip()]), first[:120]))
    unit = None
    joined = u" ".join(lines)
    match = _UNIT.search(joined) or _PEAK_UNIT.search(joined)
    if match:
        unit = _UNITS[match.group(1).lower()]
    elif default_unit in ('Gb/sec', 'MiB/sec', 'MB/sec'):
        unit = default_unit
    else:
        raise ValueError("ib_write_bw output has %d result row(s) but no column header naming the unit "
                         "(BW average[Gb/sec], BW average[MiB/sec] or BW average[MB/sec])" % len(rows))
    last = rows[-1]
    result.update(last)
    result['rows'] = rows
    result['unit'] = unit
    result['gbps_average'] = round(to_gbps(last['bw_average'], unit), 6)
    result['gbps_peak'] = round(to_gbps(last['bw_peak'], unit), 6)
    result['peak_measured'] = last['bw_peak'] > 0
    return result
