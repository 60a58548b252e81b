# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/roce_gids.py.

Real captures come from tests/fixtures/captures/show_gids/ (read through captures.py; a
missing one fails, never skips). Each capture's '# expect:' line is both read
by a generic check (index per IPv4, n_gids_found) and restated by hand below.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import roce_gids as rg
from captures import capture, captures, read_capture

CAPTURES = captures('show_gids')
UNUSED_IP = '198.51.100.77'  # TEST-NET-2, in no capture


def expect_line(header):
    return ' '.join(line[len('# expect:'):].strip() for line in header if line.startswith('# expect:'))


def v2_rows(entries, ipv4):
    return [e for e in entries if e['ipv4'] == ipv4 and e['version'] == 'v2']


capture_params = [pytest.param(path, id=path.name) for path in CAPTURES]


# ---------------------------------------------------------------------------
# real captures: generic checks driven by the '# expect:' line

_EXPECT_INDEX_RE = re.compile(r'(\d{1,3}(?:\.\d{1,3}){3})\s*->\s*(?:([A-Za-z][\w.-]*)\s+)?(?:port\s+\d+\s+)?(?:GID\s+)?(?:idx|index)\s+(\d+)')
_EXPECT_COUNT_RE = re.compile(r'n_gids_found=(\d+)')


@pytest.mark.parametrize('path', capture_params)
def test_capture_matches_its_expect_line(path):
    header, body = read_capture(path)
    expect = expect_line(header)
    result = rg.parse_show_gids(body)
    assert result.parseable

    count = _EXPECT_COUNT_RE.search(expect)
    assert count, 'expect line names no n_gids_found: %s' % expect
    assert result.n_gids_found == int(count.group(1))
    assert len(result.entries) == int(count.group(1)), result.problems

    for ipv4, device, index in _EXPECT_INDEX_RE.findall(expect):
        rows = v2_rows(result.entries, ipv4)
        assert [row['index'] for row in rows] == [int(index)], (ipv4, rows)
        if device:
            assert rows[0]['device'] == device
        resolution = rg.build_nccl_env(result.entries, [ipv4])
        assert resolution['env']['NCCL_IB_GID_INDEX'] == index
        assert resolution['env']['VLLM_HOST_IP'] == ipv4

    if re.search(r'no RoCEv2 GID found|no RoCE at all|No IPv4 GIDs at all', expect):
        assert not [e for e in result.entries if e['ipv4'] and e['version'] == 'v2']
        with pytest.raises(rg.RoceGidError, match='no GID carries this address'):
            rg.build_nccl_env(result.entries, [UNUSED_IP])


@pytest.mark.parametrize('path', capture_params)
def test_capture_rows_are_well_formed(path):
    _header, body = read_capture(path)
    for entry in rg.parse_show_gids(body).entries:
        assert set(entry) == {'device', 'port', 'index', 'gid', 'ipv4', 'version', 'netdev'}
        assert entry['version'] in ('v1', 'v2')
        assert re.match(r'^[0-9a-f]{4}(:[0-9a-f]{4}){7}$', entry['gid'])
        assert '\r' not in entry['netdev'] + entry['device']
        assert '\xa0' not in entry['netdev'] + entry['device']
        assert entry['ipv4'] == rg.ipv4_from_gid(entry['gid'])
        assert isinstance(entry['port'], int) and isinstance(entry['index'], int)


# ---------------------------------------------------------------------------
# real captures: the same facts restated by hand (netdevs, IB ports, v1 twins)

HAND_EXPECTATIONS = {
    '01-mlx5-rdma0-single-tabs.txt': dict(
        n=4, v2={'192.168.211.242': ('mlx5_0', 1, 3, 'rdma0')}, v1={'192.168.211.242': [2]}, ib_ports=[], no_ipv4=[]),
    '02-multi-dev-mixed-roce-ib-17.txt': dict(
        n=17, v2={'192.168.242.57': ('mlx5_3', 1, 3, 'ens14f0'), '172.17.242.57': ('mlx5_2', 1, 3, 'ens6'),
                  '10.16.242.57': ('mlx5_1', 1, 3, 'ens4f1')},
        v1={'10.16.242.57': [2]}, ib_ports=[('mlx5_5', 1)], no_ipv4=['mlx5_0', 'mlx5_4', 'mlx5_5']),
    '03-multi-dev-19-ib-and-vf.txt': dict(
        n=19, v2={'192.168.242.56': ('mlx5_3', 1, 3, 'ens14f0'), '172.17.242.56': ('mlx5_2', 1, 3, 'ens6')},
        v1={}, ib_ports=[('mlx5_5', 1)], no_ipv4=['mlx5_0', 'mlx5_1', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7'],
        netdevs={'mlx5_6': 'ens6f1', 'mlx5_7': 'ens6f2'}),
    '04-multiple-ipv4-same-netdev.txt': dict(
        n=10, v2={'10.22.116.221': ('mlx5_1', 1, 3, 'enp61s0f1np1'), '10.22.116.222': ('mlx5_1', 1, 5, 'enp61s0f1np1'),
                  '10.22.116.223': ('mlx5_1', 1, 7, 'enp61s0f1np1')},
        v1={'10.22.116.222': [4], '10.22.116.223': [6]}, ib_ports=[], no_ipv4=['mlx5_0']),
    '05-infiniband-only-commented.txt': dict(
        n=2, v2={}, v1={}, ib_ports=[('mlx5_0', 1), ('mlx5_1', 1)], no_ipv4=['mlx5_0', 'mlx5_1']),
    '06-bnxt-vlan-multivendor-email-wrapped.txt': dict(
        n=19, v2={'172.31.40.187': ('bnxt_re0', 1, 7, 'bnxt_roce'), '172.31.43.187': ('bnxt_re0', 1, 11, 'bnxt_roce.43'),
                  '172.31.45.187': ('bnxt_re0', 1, 9, 'bnxt_roce.45')},
        v1={'172.31.43.187': [10]}, ib_ports=[('cxgb4_0', 1), ('cxgb4_0', 2), ('hfi1_0', 1), ('mlx5_0', 1)],
        no_ipv4=['bnxt_re1', 'cxgb4_0', 'hfi1_0', 'mlx5_0'], order=['bnxt_re0', 0, 1, 10, 11, 2]),
    '15-roce-plus-ib-port-no-ipv4.txt': dict(
        n=3, v2={}, v1={}, ib_ports=[('mlx5_1', 1)], no_ipv4=['mlx5_0', 'mlx5_1'], netdevs={'mlx5_0': 'ens11f0'}),
    '16-openshift-sriov-pod-net1-tabs.txt': dict(
        n=4, v2={'192.168.10.2': ('mlx5_3', 1, 3, 'net1')}, v1={'192.168.10.2': [2]}, ib_ports=[], no_ipv4=[]),
}


@pytest.mark.parametrize('path', capture_params)
def test_capture_hand_expectations(path):
    expected = HAND_EXPECTATIONS.get(path.name)
    assert expected is not None, 'no hand-written expectations for capture %s: add them to HAND_EXPECTATIONS' % path.name
    _header, body = read_capture(path)
    result = rg.parse_show_gids(body)
    entries = result.entries
    assert result.n_gids_found == expected['n'] == len(entries)
    assert result.problems == []

    for ipv4, (device, port, index, netdev) in expected['v2'].items():
        rows = v2_rows(entries, ipv4)
        assert [(r['device'], r['port'], r['index'], r['netdev']) for r in rows] == [(device, port, index, netdev)]
        env = rg.build_nccl_env(entries, [ipv4])['env']
        assert env['NCCL_IB_HCA'] == '=' + device
        assert env['NCCL_IB_GID_INDEX'] == str(index)
        assert env['NCCL_SOCKET_IFNAME'] == '=' + netdev
        assert env['GLOO_SOCKET_IFNAME'] == env['TP_SOCKET_IFNAME'] == netdev
    for ipv4, indices in expected['v1'].items():
        assert [r['index'] for r in entries if r['ipv4'] == ipv4 and r['version'] == 'v1'] == indices
    for device, port in expected['ib_ports']:
        rows = [r for r in entries if r['device'] == device and r['port'] == port]
        assert rows and all(r['netdev'] == '' and r['version'] == 'v1' and r['ipv4'] == '' for r in rows)
    for device in expected['no_ipv4']:
        assert not [r for r in entries if r['device'] == device and r['ipv4']]
    for device, netdev in expected.get('netdevs', {}).items():
        assert set(r['netdev'] for r in entries if r['device'] == device) == {netdev}
    if 'order' in expected:
        device = expected['order'][0]
        assert [r['index'] for r in entries if r['device'] == device][:len(expected['order']) - 1] == expected['order'][1:]
    if not expected['v2']:
        with pytest.raises(rg.RoceGidError) as excinfo:
            rg.build_nccl_env(entries, [UNUSED_IP])
        assert UNUSED_IP in excinfo.value.msg
        assert 'ibdev2netdev' in excinfo.value.msg


def test_capture_04_matches_on_the_address_not_the_first_v2_gid():
    path = capture('show_gids', '04-multiple-ipv4-same-netdev.txt')
    entries = rg.parse_show_gids(read_capture(path)[1]).entries
    assert rg.build_nccl_env(entries, ['10.22.116.223'])['env']['NCCL_IB_GID_INDEX'] == '7'
    assert rg.build_nccl_env(entries, ['10.22.116.222'])['env']['NCCL_IB_GID_INDEX'] == '5'


def test_capture_02_v1_request_and_summary():
    path = capture('show_gids', '02-multi-dev-mixed-roce-ib-17.txt')
    entries = rg.parse_show_gids(read_capture(path)[1]).entries
    assert rg.build_nccl_env(entries, ['10.16.242.57'], roce_version='v1')['env']['NCCL_IB_GID_INDEX'] == '2'
    summary = rg.summarize_table(entries)
    assert summary.startswith('17 GID(s) on 6 port(s)')
    assert 'mlx5_5 port 1 (no netdev: InfiniBand?)' in summary
    assert '10.16.242.57 [v1 idx 2, v2 idx 3]' in summary


# ---------------------------------------------------------------------------
# synthetic damage: each kind of paste damage named in the samples README

def show_gids_line(dev, port, index, gid, ipv4, ver, ndev):
    """One row exactly as mlnx-tools show_gids prints it."""
    return '%s\t%s\t%s\t%s\t%s\t%s\t%s' % (dev, port, index, gid, ipv4 + '  ' if ipv4 else '', ver, ndev)


HEADER = 'DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV'
DASHES = '---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---'
LL0 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03da'
LL1 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03db'


def mapped(ipv4):
    a, b, c, d = (int(x) for x in ipv4.split('.'))
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % (a, b, c, d)


# DGX Spark: one QSFP port = two PCIe twins; long RDMA device names (12 chars) break tab columns.
SPARK_ROWS = [
    ('rocep1s0f0', 1, 0, LL0, '', 'v1', 'enp1s0f0np0'),
    ('rocep1s0f0', 1, 1, LL0, '', 'v2', 'enp1s0f0np0'),
    ('rocep1s0f0', 1, 2, mapped('192.168.100.10'), '192.168.100.10', 'v1', 'enp1s0f0np0'),
    ('rocep1s0f0', 1, 3, mapped('192.168.100.10'), '192.168.100.10', 'v2', 'enp1s0f0np0'),
    ('roceP2p1s0f0', 1, 0, LL1, '', 'v1', 'enP2p1s0f0np0'),
    ('roceP2p1s0f0', 1, 1, LL1, '', 'v2', 'enP2p1s0f0np0'),
    ('roceP2p1s0f0', 1, 2, mapped('192.168.101.10'), '192.168.101.10', 'v1', 'enP2p1s0f0np0'),
    ('roceP2p1s0f0', 1, 3, mapped('192.168.101.10'), '192.168.101.10', 'v2', 'enP2p1s0f0np0'),
]


def spark_text(rows=None, trailer=True, eol='\n'):
    rows = SPARK_ROWS if rows is None else rows
    lines = [HEADER, DASHES] + [show_gids_line(*row) for row in rows]
    if trailer:
        lines.append('n_gids_found=%d' % len(rows))
    return eol.join(lines) + eol


def expected_spark_entries():
    return [dict(device=d, port=p, index=i, gid=g, ipv4=ip, version=v, netdev=n) for d, p, i, g, ip, v, n in SPARK_ROWS]


def _wrap_after(token_kind):
    """Mail-client soft wrap: break each row after the GID / IPv4 / VER, leaving trailing whitespace."""
    out = [HEADER, DASHES]
    for row in SPARK_ROWS:
        dev, port, index, gid, ipv4, ver, ndev = row
        head = '%s\xa0\xa0 %s\xa0\xa0 %s\xa0\xa0 %s' % (dev, port, index, gid)
        if token_kind == 'gid':
            out += [head + ' \xa0\xa0 ', ('%s \xa0\xa0 ' % ipv4 if ipv4 else '') + '%s\xa0\xa0 %s' % (ver, ndev)]
        elif token_kind == 'ipv4':
            out += [head + (' %s' % ipv4 if ipv4 else '') + ' \xa0 ', '%s\xa0\xa0 %s' % (ver, ndev)]
        elif token_kind == 'ver':
            out += [head + (' %s' % ipv4 if ipv4 else '') + ' %s \xa0 ' % ver, ndev]
        elif token_kind == 'index':
            out += ['%s %s %s ' % (dev, port, index), '%s %s %s %s' % (gid, ipv4, ver, ndev)]
    out.append('n_gids_found=%d' % len(SPARK_ROWS))
    return '\n'.join(out) + '\n'


DAMAGE_CASES = [
    pytest.param(spark_text(), id='exact-tabs'),
    pytest.param(spark_text().expandtabs(8), id='tabs-expanded-long-device-names'),
    pytest.param(spark_text().expandtabs(4), id='tabs-expanded-4'),
    pytest.param(spark_text(eol='\r\n'), id='crlf'),
    pytest.param(spark_text(eol='\r\n').expandtabs(8), id='crlf-expanded'),
    pytest.param(spark_text().replace('\t', '\xa0\xa0\xa0 '), id='nbsp-runs'),
    pytest.param(spark_text().replace('\t', '\u2003'), id='unicode-em-space'),
    pytest.param(''.join('    \t' + line for line in spark_text().splitlines(True)), id='indentation'),
    pytest.param(''.join('# ' + line for line in spark_text().expandtabs(8).splitlines(True)), id='comment-hash-space'),
    pytest.param(''.join('#' + line for line in spark_text().splitlines(True)), id='comment-hash-glued'),
    pytest.param(''.join('> ' + line for line in spark_text().splitlines(True)), id='mail-quote'),
    pytest.param(''.join('>> ' + line for line in spark_text().splitlines(True)), id='mail-quote-nested'),
    pytest.param(spark_text().rstrip('\n') + '.\n', id='glued-period-on-trailer'),
    pytest.param('\ufeff' + spark_text(), id='byte-order-mark'),
    pytest.param('$ show_gids\n' + spark_text() + '[root@spark-01 ~]# \n', id='surrounding-prompts'),
    pytest.param('```\n' + spark_text() + '```\n', id='markdown-fence'),
    pytest.param(_wrap_after('gid'), id='wrapped-after-gid'),
    pytest.param(_wrap_after('ipv4'), id='wrapped-after-ipv4'),
    pytest.param(_wrap_after('ver'), id='wrapped-after-version'),
    pytest.param(_wrap_after('index'), id='wrapped-after-index'),
    pytest.param(spark_text() + spark_text(), id='two-captures-concatenated'),
    pytest.param(''.join('| %s |\n' % ' | '.join(c for c in line.split('\t') if c) for line in spark_text().splitlines()),
                 id='markdown-table'),
    pytest.param(''.join('\x1b[0;32m%s\x1b[0m\n' % line for line in spark_text().splitlines()), id='ansi-colours'),
    pytest.param(json.dumps(spark_text())[1:-1], id='json-escaped-string'),
    pytest.param(''.join('%6d\t%s' % (n, line) for n, line in enumerate(spark_text().splitlines(True), 1)), id='cat-n-line-numbers'),
]


@pytest.mark.parametrize('text', DAMAGE_CASES)
def test_damaged_spark_table_parses(text):
    result = rg.parse_show_gids(text)
    entries = result.entries
    expected = expected_spark_entries()
    if len(entries) == 2 * len(expected):  # concatenated captures
        entries = entries[:len(expected)]
    assert entries == expected, result.problems
    assert result.n_gids_found == len(expected)
    env = rg.build_nccl_env(result.entries, ['192.168.100.10', '192.168.101.10'])['env']
    assert env == {
        'NCCL_IB_HCA': '=rocep1s0f0,roceP2p1s0f0',
        'NCCL_IB_GID_INDEX': '3',
        'NCCL_SOCKET_IFNAME': '=enp1s0f0np0',
        'GLOO_SOCKET_IFNAME': 'enp1s0f0np0',
        'TP_SOCKET_IFNAME': 'enp1s0f0np0',
        'VLLM_HOST_IP': '192.168.100.10',
    }


def test_surrounding_text_is_reported_not_fatal():
    result = rg.parse_show_gids('$ show_gids\n' + spark_text())
    assert len(result.entries) == 8
    assert result.parseable
    assert any('show_gids' in problem for problem in result.problems)


def test_missing_trailer():
    result = rg.parse_show_gids(spark_text(trailer=False))
    assert result.n_gids_found is None
    assert len(result.entries) == 8
    assert result.problems == []


def test_glued_period_on_last_netdev_without_trailer():
    text = spark_text(trailer=False).rstrip('\n') + '.'
    result = rg.parse_show_gids(text)
    assert result.entries[-1]['netdev'] == 'enP2p1s0f0np0'


def test_glued_period_on_ib_version():
    text = 'mlx5_5\t1\t0\tfe80:0000:0000:0000:08c0:eb03:00ea:50de\t\t\tv1.'
    entry = rg.parse_show_gids(text).entries[0]
    assert (entry['version'], entry['netdev']) == ('v1', '')


def test_trailer_count_mismatch_is_reported():
    text = spark_text().replace('n_gids_found=8', 'n_gids_found=9')
    result = rg.parse_show_gids(text)
    assert len(result.entries) == 8
    assert any('n_gids_found=9 but 8' in problem for problem in result.problems)


def test_truncated_row_is_reported():
    lines = spark_text(trailer=False).splitlines()
    lines[-1] = lines[-1].split('\t192.168')[0]  # row cut after the GID, nothing follows
    result = rg.parse_show_gids('\n'.join(lines))
    assert len(result.entries) == 7
    assert any('without a RoCE version' in problem for problem in result.problems)


def test_redacted_gids_are_reported_not_fatal():
    rows = list(SPARK_ROWS)
    rows[3] = ('rocep1s0f0', 1, 3, '0000:0000:0000:0000:0000:ffff:xxxx:xxxx', '192.168.x.x', 'v2', 'enp1s0f0np0')
    rows[7] = ('roceP2p1s0f0', 1, 3, '0000:0000:0000:0000:0000:ffff:XXXX:XXXX', '192.168.101.10', 'v2', 'enP2p1s0f0np0')
    result = rg.parse_show_gids(spark_text(rows))
    assert len(result.entries) == 8
    assert sum('redacted' in problem for problem in result.problems) == 2
    redacted = [e for e in result.entries if 'x' in e['gid']]
    assert [(e['index'], e['ipv4']) for e in redacted] == [(3, ''), (3, '192.168.101.10')]
    # the printed IPv4 survives redaction of the GID; the redacted address cannot match
    assert rg.build_nccl_env(result.entries, ['192.168.101.10'])['env']['NCCL_IB_GID_INDEX'] == '3'
    with pytest.raises(rg.RoceGidError) as excinfo:
        rg.build_nccl_env(result.entries, ['192.168.100.10'])
    assert 'exists only as RoCE v1' in excinfo.value.msg
    assert 'redacted GID' in excinfo.value.msg


def test_rows_without_ipv4_column_derive_it_from_the_gid():
    text = 'mlx5_0 1 3 0000:0000:0000:0000:0000:ffff:0a00:0001 v2 eth0\n'
    assert rg.parse_show_gids(text).entries[0]['ipv4'] == '10.0.0.1'


def test_textual_versions_and_uppercase_and_compressed_gids():
    text = ('mlx5_0 1 2 0000:0000:0000:0000:0000:FFFF:0A00:0001 10.0.0.1 IB/RoCE v1 eth0\n'
            'mlx5_0 1 3 ::ffff:10.0.0.1 10.0.0.1 RoCE v2 eth0\n'
            'mlx5_0 1 4 ::ffff:10.0.0.2 RoCEv2 eth0\n')
    entries = rg.parse_show_gids(text).entries
    assert [(e['index'], e['version'], e['ipv4'], e['gid']) for e in entries] == [
        (2, 'v1', '10.0.0.1', '0000:0000:0000:0000:0000:ffff:0a00:0001'),
        (3, 'v2', '10.0.0.1', '0000:0000:0000:0000:0000:ffff:0a00:0001'),
        (4, 'v2', '10.0.0.2', '0000:0000:0000:0000:0000:ffff:0a00:0002'),
    ]


def test_vlan_and_bond_netdevs():
    rows = [
        ('mlx5_bond_0', 1, 0, LL0, '', 'v1', 'bond0'),
        ('mlx5_bond_0', 1, 3, mapped('10.1.0.5'), '10.1.0.5', 'v2', 'bond0'),
        ('mlx5_bond_0', 1, 5, mapped('10.100.0.5'), '10.100.0.5', 'v2', 'bond0.100'),
        ('mlx5_2', 1, 7, mapped('10.2.0.5'), '10.2.0.5', 'v2', 'enp1s0f0np0.42'),
    ]
    entries = rg.parse_show_gids(spark_text(rows).expandtabs(8)).entries
    assert [e['netdev'] for e in entries] == ['bond0', 'bond0', 'bond0.100', 'enp1s0f0np0.42']
    env = rg.build_nccl_env(entries, ['10.100.0.5'])['env']
    assert (env['NCCL_IB_GID_INDEX'], env['NCCL_SOCKET_IFNAME'], env['GLOO_SOCKET_IFNAME']) == ('5', '=bond0.100', 'bond0.100')


def test_listing_order_is_kept_and_does_not_matter():
    rows = [('mlx5_0', 1, i, mapped('10.0.0.%d' % i) if i >= 2 else LL0, '10.0.0.%d' % i if i >= 2 else '', 'v2', 'eth0')
            for i in (0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9)]
    entries = rg.parse_show_gids(spark_text(rows)).entries
    assert [e['index'] for e in entries] == [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert rg.build_nccl_env(entries, ['10.0.0.11'])['env']['NCCL_IB_GID_INDEX'] == '11'


@pytest.mark.parametrize('text', [
    pytest.param('', id='empty'),
    pytest.param('\n\n  \r\n', id='blank-lines'),
    pytest.param(HEADER + '\n' + DASHES + '\nn_gids_found=0\n', id='no-rdma-device'),
    pytest.param('n_gids_found=0', id='trailer-only'),
])
def test_empty_tables(text):
    result = rg.parse_show_gids(text)
    assert result.entries == []
    assert result.parseable
    with pytest.raises(rg.RoceGidError) as excinfo:
        rg.build_nccl_env(result.entries, ['10.0.0.1'])
    assert '10.0.0.1' in excinfo.value.msg
    assert 'no GIDs at all' in excinfo.value.msg


@pytest.mark.parametrize('text', [
    pytest.param('bash: show_gids: command not found\n', id='command-not-found'),
    pytest.param('<html><body>502 Bad Gateway</body></html>\n', id='html'),
    pytest.param('mlx5_0 port 1 ==> enp1s0f0np0 (Up)\n', id='ibdev2netdev-instead'),
])
def test_unparseable_output(text):
    result = rg.parse_show_gids(text)
    assert result.entries == []
    assert not result.parseable
    assert result.problems


# ---------------------------------------------------------------------------
# resolution

def spark_entries():
    return rg.parse_show_gids(spark_text()).entries


def test_two_rails_common_index():
    resolution = rg.build_nccl_env(spark_entries(), ['192.168.100.10', '192.168.101.10'])
    assert resolution['gid_index'] == 3
    assert [(r['device'], r['indices']) for r in resolution['rails']] == [('rocep1s0f0', [3]), ('roceP2p1s0f0', [3])]
    assert 'index 3' in resolution['summary'] and 'rocep1s0f0' in resolution['summary']


def test_rail_order_sets_primary():
    env = rg.build_nccl_env(spark_entries(), ['192.168.101.10', '192.168.100.10'])['env']
    assert env['NCCL_IB_HCA'] == '=roceP2p1s0f0,rocep1s0f0'
    assert env['VLLM_HOST_IP'] == '192.168.101.10'
    assert env['GLOO_SOCKET_IFNAME'] == 'enP2p1s0f0np0'


def drifted_entries():
    rows = list(SPARK_ROWS[:6]) + [
        ('roceP2p1s0f0', 1, 4, mapped('192.168.101.10'), '192.168.101.10', 'v1', 'enP2p1s0f0np0'),
        ('roceP2p1s0f0', 1, 5, mapped('192.168.101.10'), '192.168.101.10', 'v2', 'enP2p1s0f0np0'),
    ]
    return rg.parse_show_gids(spark_text(rows)).entries


def test_two_rails_without_common_index_fail():
    with pytest.raises(rg.RoceGidError) as excinfo:
        rg.build_nccl_env(drifted_entries(), ['192.168.100.10', '192.168.101.10'])
    msg = excinfo.value.msg
    assert 'no common RoCE v2 GID index' in msg
    assert '192.168.100.10 on rocep1s0f0 port 1: index 3' in msg
    assert '192.168.101.10 on roceP2p1s0f0 port 1: index 5' in msg
    assert 'nccl_gid_auto' in msg


def test_two_rails_without_common_index_nccl_auto():
    resolution = rg.build_nccl_env(drifted_entries(), ['192.168.100.10', '192.168.101.10'], nccl_gid_auto=True)
    env = resolution['env']
    assert resolution['gid_index'] is None
    assert 'NCCL_IB_GID_INDEX' not in env
    assert env['NCCL_IB_ADDR_FAMILY'] == 'AF_INET'
    assert env['NCCL_IB_ROCE_VERSION_NUM'] == '2'
    assert 'NCCL_IB_ADDR_RANGE' not in env
    assert env['NCCL_IB_HCA'] == '=rocep1s0f0,roceP2p1s0f0'
    assert 'NCCL selects' in resolution['summary']


def test_nccl_auto_addr_range_from_prefix():
    env = rg.build_nccl_env(drifted_entries(), ['192.168.100.10/16', '192.168.101.10/16'], nccl_gid_auto=True)['env']
    assert env['NCCL_IB_ADDR_RANGE'] == '192.168.0.0/16'
    env = rg.build_nccl_env(drifted_entries(), ['192.168.100.10/24', '192.168.101.10/24'], nccl_gid_auto=True)['env']
    assert 'NCCL_IB_ADDR_RANGE' not in env


def test_nccl_auto_still_pins_a_common_index():
    env = rg.build_nccl_env(spark_entries(), ['192.168.100.10', '192.168.101.10'], nccl_gid_auto=True)['env']
    assert env['NCCL_IB_GID_INDEX'] == '3'
    assert 'NCCL_IB_ADDR_FAMILY' not in env


@pytest.mark.parametrize('kwargs', [
    dict(fabric_ipv4=['192.168.100.10']),
    dict(fabric_ipv4=['192.168.100.10', '192.168.101.10']),
    dict(fabric_ipv4=['192.168.100.10', '192.168.101.10'], nccl_gid_auto=True),
    dict(fabric_ipv4=['192.168.100.10/24'], socket_ifname='enp1s0f0np0'),
])
def test_no_value_is_ever_empty(kwargs):
    for entries in (spark_entries(), drifted_entries()):
        try:
            env = rg.build_nccl_env(entries, **kwargs)['env']
        except rg.RoceGidError:
            continue
        assert all(isinstance(v, str) and v.strip() for v in env.values()), env
        assert set(rg.NCCL_ENV_KEYS) - {'NCCL_IB_GID_INDEX'} <= set(env)


def test_v1_only_address_hint():
    rows = [r for r in SPARK_ROWS if not (r[4] == '192.168.100.10' and r[5] == 'v2')]
    with pytest.raises(rg.RoceGidError) as excinfo:
        rg.build_nccl_env(rg.parse_show_gids(spark_text(rows)).entries, ['192.168.100.10'])
    msg = excinfo.value.msg
    assert '192.168.100.10' in msg
    assert 'exists only as RoCE v1' in msg
    assert 'rocep1s0f0 port 1 index 2 (v1, netdev enp1s0f0np0)' in msg
    assert 'roceP2p1s0f0 port 1 (enP2p1s0f0np0): 192.168.101.10 [v1 idx 2, v2 idx 3]' in msg
    assert excinfo.value.fabric_ipv4 == ['192.168.100.10']


def test_absent_address_hint():
    with pytest.raises(rg.RoceGidError) as excinfo:
        rg.build_nccl_env(spark_entries(), ['192.168.100.10', '10.9.9.9'])
    msg = excinfo.value.msg
    assert '10.9.9.9: no GID carries this address' in msg
    assert 'ibdev2netdev' in msg and 'ibstat' in msg
    assert 'Found 8 GID(s) on 2 port(s)' in msg


def test_hca_filter():
    env = rg.build_nccl_env(spark_entries(), ['192.168.101.10'], hca=['roceP2p1s0f0'])['env']
    assert env['NCCL_IB_HCA'] == '=roceP2p1s0f0'
    with pytest.raises(rg.RoceGidError, match='outside the hca filter rocep1s0f0'):
        rg.build_nccl_env(spark_entries(), ['192.168.101.10'], hca=['=rocep1s0f0:1'])


def test_same_address_on_two_devices_is_ambiguous():
    rows = [('mlx5_0', 1, 3, mapped('10.0.0.1'), '10.0.0.1', 'v2', 'eth0'),
            ('mlx5_1', 1, 3, mapped('10.0.0.1'), '10.0.0.1', 'v2', 'eth0')]
    entries = rg.parse_show_gids(spark_text(rows)).entries
    with pytest.raises(rg.RoceGidError, match='carried by several ports'):
        rg.build_nccl_env(entries, ['10.0.0.1'])
    assert rg.build_nccl_env(entries, ['10.0.0.1'], hca=['mlx5_1'])['env']['NCCL_IB_HCA'] == '=mlx5_1'


def test_two_addresses_on_one_port_is_one_rail():
    rows = [('mlx5_1', 1, 3, mapped('10.0.0.1'), '10.0.0.1', 'v2', 'eth1'),
            ('mlx5_1', 1, 5, mapped('10.0.0.2'), '10.0.0.2', 'v2', 'eth1')]
    with pytest.raises(rg.RoceGidError, match='same device mlx5_1 port 1'):
        rg.build_nccl_env(rg.parse_show_gids(spark_text(rows)).entries, ['10.0.0.1', '10.0.0.2'])


def test_multi_port_device_names_the_port():
    rows = [('mlx5_0', 1, 3, mapped('10.0.0.1'), '10.0.0.1', 'v2', 'eth0'),
            ('mlx5_0', 2, 3, mapped('10.0.1.1'), '10.0.1.1', 'v2', 'eth1')]
    env = rg.build_nccl_env(rg.parse_show_gids(spark_text(rows)).entries, ['10.0.1.1'])['env']
    assert env['NCCL_IB_HCA'] == '=mlx5_0:2'


def test_rail_without_netdev_needs_socket_ifname():
    entries = [dict(device='mlx5_0', port=1, index=3, gid=mapped('10.0.0.1'), ipv4='10.0.0.1', version='v2', netdev='')]
    with pytest.raises(rg.RoceGidError, match='give socket_ifname'):
        rg.build_nccl_env(entries, ['10.0.0.1'])
    env = rg.build_nccl_env(entries, ['10.0.0.1'], socket_ifname='eth9')['env']
    assert (env['NCCL_SOCKET_IFNAME'], env['GLOO_SOCKET_IFNAME']) == ('=eth9', 'eth9')


def test_a_bootstrap_network_moves_the_sockets_and_vllm_host_ip_not_the_hcas():
    entries = [dict(device='rocep1s0f1', port=1, index=3, gid=mapped('192.168.100.1'), ipv4='192.168.100.1', version='v2',
                    netdev='enp1s0f1np1')]
    env = rg.build_nccl_env(entries, ['192.168.100.1'], socket_ifname='enP7s7', host_ip='192.168.1.11')['env']
    assert (env['NCCL_SOCKET_IFNAME'], env['TP_SOCKET_IFNAME'], env['VLLM_HOST_IP']) == ('=enP7s7', 'enP7s7', '192.168.1.11')
    assert (env['NCCL_IB_HCA'], env['NCCL_IB_GID_INDEX']) == ('=rocep1s0f1', '3')
    assert rg.build_nccl_env(entries, ['192.168.100.1'])['env']['VLLM_HOST_IP'] == '192.168.100.1'


@pytest.mark.parametrize('fabric, match', [
    ([], 'fabric_ipv4 is empty'),
    (['10.0.0.256'], 'not an IPv4 address'),
    (['fe80::1'], 'not an IPv4 address'),
    (['192.168.100.10', '192.168.100.10/24'], 'twice'),
])
def test_bad_fabric_ipv4(fabric, match):
    with pytest.raises(rg.RoceGidError, match=match):
        rg.build_nccl_env(spark_entries(), fabric)


def test_bad_roce_version():
    with pytest.raises(rg.RoceGidError, match='v1 or v2'):
        rg.find_rails(spark_entries(), ['192.168.100.10'], roce_version='v3')


# ---------------------------------------------------------------------------
# sysfs

def make_sysfs(root, rows):
    """rows: (device, port, index, gid, types text or None, ndev text or None)."""
    for device, port, index, gid, gid_type, ndev in rows:
        port_dir = root / 'class' / 'infiniband' / device / 'ports' / str(port)
        for sub in ('gids', 'gid_attrs/types', 'gid_attrs/ndevs'):
            (port_dir / sub).mkdir(parents=True, exist_ok=True)
        (port_dir / 'gids' / str(index)).write_text(gid + '\n')
        if gid_type is not None:
            (port_dir / 'gid_attrs' / 'types' / str(index)).write_text(gid_type + '\n')
        if ndev is not None:
            (port_dir / 'gid_attrs' / 'ndevs' / str(index)).write_text(ndev + '\n')


def sysfs_rows_from_entries(entries):
    return [(e['device'], e['port'], e['index'], e['gid'], 'RoCE v2' if e['version'] == 'v2' else 'IB/RoCE v1', e['netdev'] or None)
            for e in entries]


def test_sysfs_gid_entry_pure():
    entry = rg.sysfs_gid_entry('rocep1s0f0', '1', '3', mapped('192.168.100.10') + '\n', 'RoCE v2\n', 'enp1s0f0np0\n')
    assert entry == dict(device='rocep1s0f0', port=1, index=3, gid=mapped('192.168.100.10'), ipv4='192.168.100.10',
                         version='v2', netdev='enp1s0f0np0')
    assert rg.sysfs_gid_entry('mlx5_0', '1', '0', LL0, 'IB/RoCE v1', None)['version'] == 'v1'
    assert rg.sysfs_gid_entry('mlx5_0', '1', '0', LL0, None, None) == dict(
        device='mlx5_0', port=1, index=0, gid=LL0, ipv4='', version='v1', netdev='')
    assert rg.sysfs_gid_entry('mlx5_0', '1', '0', LL0, '', '')['version'] == 'v1'
    assert rg.sysfs_gid_entry('mlx5_0', '1', '9', '0000:0000:0000:0000:0000:0000:0000:0000\n', None, None) is None
    assert rg.sysfs_gid_entry('mlx5_0', '1', '9', 'fe80:0000:0000:0000:0000:0000:0000:0000', None, None) is None
    assert rg.sysfs_gid_entry('mlx5_0', '1', '9', 'garbage', None, None) is None


def test_read_sysfs_gids(tmp_path):
    rows = [(d, p, i, g, 'RoCE v2' if v == 'v2' else 'IB/RoCE v1', n) for d, p, i, g, _ip, v, n in SPARK_ROWS]
    rows += [
        ('rocep1s0f0', 1, 10, mapped('192.168.100.99'), 'RoCE v2', 'enp1s0f0np0'),  # index 10 sorts after 3
        ('rocep1s0f0', 1, 4, '0000:0000:0000:0000:0000:0000:0000:0000', None, None),  # empty slot, types unreadable
        ('mlx5_ib', 1, 0, 'fe80:0000:0000:0000:08c0:eb03:00ea:50de', None, None),  # IB port: no types, no ndev
    ]
    make_sysfs(tmp_path, rows)
    (tmp_path / 'class' / 'infiniband' / 'rocep1s0f0' / 'ports' / 'not-a-port').mkdir()
    entries = rg.read_sysfs_gids(str(tmp_path))
    assert [(e['device'], e['index']) for e in entries] == [
        ('mlx5_ib', 0), ('roceP2p1s0f0', 0), ('roceP2p1s0f0', 1), ('roceP2p1s0f0', 2), ('roceP2p1s0f0', 3),
        ('rocep1s0f0', 0), ('rocep1s0f0', 1), ('rocep1s0f0', 2), ('rocep1s0f0', 3), ('rocep1s0f0', 10)]
    assert entries[0] == dict(device='mlx5_ib', port=1, index=0, gid='fe80:0000:0000:0000:08c0:eb03:00ea:50de', ipv4='',
                              version='v1', netdev='')
    env = rg.build_nccl_env(entries, ['192.168.100.10', '192.168.101.10'])['env']
    assert env['NCCL_IB_GID_INDEX'] == '3'


def test_read_sysfs_gids_without_rdma(tmp_path):
    assert rg.read_sysfs_gids(str(tmp_path)) == []
    assert rg.read_sysfs_gids(str(tmp_path / 'missing')) == []


@pytest.mark.parametrize('path', capture_params)
def test_sysfs_and_show_gids_give_the_same_table(tmp_path, path):
    entries = rg.parse_show_gids(read_capture(path)[1]).entries
    make_sysfs(tmp_path, sysfs_rows_from_entries(entries))

    def key(entry):
        return (entry['device'], entry['port'], entry['index'])
    assert sorted(rg.read_sysfs_gids(str(tmp_path)), key=key) == sorted(entries, key=key)


# ---------------------------------------------------------------------------
# environment files

def test_render_env_file():
    text = rg.render_env_file({'NCCL_IB_HCA': '=a,b', 'NCCL_IB_GID_INDEX': '3', 'X': 'two words', 'Y': 'q"$`\\'},
                              header='line one\nline two')
    assert text == ('# line one\n# line two\nNCCL_IB_HCA==a,b\nNCCL_IB_GID_INDEX=3\nX="two words"\nY="q\\"\\$\\`\\\\"\n')
    assert rg.parse_env_file(text) == {'NCCL_IB_HCA': '=a,b', 'NCCL_IB_GID_INDEX': '3', 'X': 'two words', 'Y': 'q"$`\\'}


@pytest.mark.parametrize('env', [{'BAD-KEY': 'x'}, {'A': 'x\ny'}, {'1A': 'x'}])
def test_render_env_file_rejects(env):
    with pytest.raises(ValueError):
        rg.render_env_file(env)


def test_parse_env_file():
    text = "# comment\n; other\n\nexport NCCL_NET=IB\nNCCL_DEBUG = 'WARN'\nEMPTY=\n"
    assert rg.parse_env_file(text) == {'NCCL_NET': 'IB', 'NCCL_DEBUG': 'WARN', 'EMPTY': ''}
    with pytest.raises(ValueError, match='line 1'):
        rg.parse_env_file('no equals sign\n')


def test_write_env_file_atomic(tmp_path):
    target = tmp_path / 'sub' / 'nccl.env'
    old_umask = os.umask(0o077)
    try:
        rg.write_env_file(str(target), 'A=1\n')
        rg.write_env_file(str(target), 'A=2\n')
    finally:
        os.umask(old_umask)
    assert target.read_text() == 'A=2\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ['nccl.env']


# ---------------------------------------------------------------------------
# never a traceback: mangled real captures only ever give a ParseResult or a RoceGidError

def _mangle(text, rng):
    operations = [
        lambda t: t.expandtabs(rng.choice([1, 2, 4, 8])),
        lambda t: t.replace('\n', '\r\n'),
        lambda t: t.replace('\t', rng.choice(['\xa0', ' \xa0 ', '\u2003', '  '])),
        lambda t: ''.join(rng.choice(['# ', '> ', '  ', '']) + line for line in t.splitlines(True)),
        lambda t: t[:rng.randrange(len(t) + 1)],
        lambda t: '\n'.join(line for line in t.split('\n') if rng.random() > 0.2),
        lambda t: t.replace(rng.choice(['c0a8', 'fe80', '0000', 'ffff']), 'xxxx'),
        lambda t: t.rstrip() + '.',
        lambda t: ''.join(c for c in t if rng.random() > 0.01),
        lambda t: t.replace('\t', '\n', rng.randrange(5)),
    ]
    for _step in range(rng.randrange(1, 5)):
        text = rng.choice(operations)(text)
    return text


@pytest.mark.parametrize('path', capture_params)
def test_mangled_captures_never_crash(path):
    body = read_capture(path)[1]
    rng = random.Random(path.name)
    for _attempt in range(200):
        text = _mangle(body, rng)
        result = rg.parse_show_gids(text)
        assert isinstance(result.problems, list)
        for entry in result.entries:
            assert entry['version'] in ('v1', 'v2') and isinstance(entry['index'], int)
        addresses = sorted(set(e['ipv4'] for e in result.entries if e['ipv4'])) or [UNUSED_IP]
        for address in addresses[:3]:
            try:
                env = rg.build_nccl_env(result.entries, [address])['env']
            except rg.RoceGidError as exc:
                assert address in exc.msg
            else:
                assert all(value for value in env.values())
