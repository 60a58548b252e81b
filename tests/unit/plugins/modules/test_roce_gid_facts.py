# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/roce_gid_facts.py: table-driven with mocked commands, plus one run through ansible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import roce_gid_facts
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json
from captures import capture

REPO_ROOT = Path(__file__).resolve().parents[4]

LL0 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03da'
LL1 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03db'
IP0, IP1 = '192.168.100.10', '192.168.101.10'


def mapped(ipv4):
    a, b, c, d = (int(x) for x in ipv4.split('.'))
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % (a, b, c, d)


def spark_rows(index0=3, index1=3, v2=True):
    """Sysfs rows (device, port, index, gid, type, ndev) of a DGX Spark port: two PCIe twins."""
    rows = [
        ('rocep1s0f0', 1, 0, LL0, 'IB/RoCE v1', 'enp1s0f0np0'),
        ('rocep1s0f0', 1, 1, LL0, 'RoCE v2', 'enp1s0f0np0'),
        ('rocep1s0f0', 1, index0 - 1, mapped(IP0), 'IB/RoCE v1', 'enp1s0f0np0'),
        ('roceP2p1s0f0', 1, 0, LL1, 'IB/RoCE v1', 'enP2p1s0f0np0'),
        ('roceP2p1s0f0', 1, 1, LL1, 'RoCE v2', 'enP2p1s0f0np0'),
        ('roceP2p1s0f0', 1, index1 - 1, mapped(IP1), 'IB/RoCE v1', 'enP2p1s0f0np0'),
    ]
    if v2:
        rows += [('rocep1s0f0', 1, index0, mapped(IP0), 'RoCE v2', 'enp1s0f0np0'),
                 ('roceP2p1s0f0', 1, index1, mapped(IP1), 'RoCE v2', 'enP2p1s0f0np0')]
    return rows


def make_sysfs(root, rows):
    for device, port, index, gid, gid_type, ndev in rows:
        port_dir = root / 'class' / 'infiniband' / device / 'ports' / str(port)
        for sub in ('gids', 'gid_attrs/types', 'gid_attrs/ndevs'):
            (port_dir / sub).mkdir(parents=True, exist_ok=True)
        (port_dir / 'gids' / str(index)).write_text(gid + '\n')
        if gid_type is not None:
            (port_dir / 'gid_attrs' / 'types' / str(index)).write_text(gid_type + '\n')
        if ndev is not None:
            (port_dir / 'gid_attrs' / 'ndevs' / str(index)).write_text(ndev + '\n')


def show_gids_text(rows):
    """Render sysfs-style rows as show_gids prints them."""
    lines = ['DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV', '---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---']
    for device, port, index, gid, gid_type, ndev in rows:
        ipv4 = ''
        if gid.startswith('0000'):  # show_gids prints the IPv4 of IPv4-mapped GIDs, followed by two spaces
            ipv4 = '%d.%d.%d.%d  ' % (int(gid[30:32], 16), int(gid[32:34], 16), int(gid[35:37], 16), int(gid[37:39], 16))
        ver = 'v2' if gid_type == 'RoCE v2' else 'v1'
        lines.append('%s\t%s\t%s\t%s\t%s\t%s\t%s' % (device, port, index, gid, ipv4, ver, ndev or ''))
    lines.append('n_gids_found=%d' % len(rows))
    return '\n'.join(lines) + '\n'


def run_module(args, bin_path=None, command=None):
    """Run main() with get_bin_path/run_command mocked. Returns (result, get_bin_path mock, run_command mock)."""
    command = command or (0, '', '')
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', return_value=bin_path) as get_bin_path, \
            mock.patch.object(basic.AnsibleModule, 'run_command', return_value=command) as run_command:
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            roce_gid_facts.main()
    return excinfo.value.args[0], get_bin_path, run_command


SPARK_ENV = {
    'NCCL_IB_HCA': '=rocep1s0f0,roceP2p1s0f0',
    'NCCL_IB_GID_INDEX': '3',
    'NCCL_SOCKET_IFNAME': '=enp1s0f0np0',
    'GLOO_SOCKET_IFNAME': 'enp1s0f0np0',
    'TP_SOCKET_IFNAME': 'enp1s0f0np0',
    'VLLM_HOST_IP': IP0,
}

# Each case: id, module args, sysfs rows (tree in tmp_path, sysfs_root set to it) or None,
# show_gids on PATH (its stdout rows, or a (rc, out, err) tuple) or None, expectations.
CASES = [
    dict(id='show_gids present', args=dict(fabric_ipv4=[IP0]), show_gids=spark_rows(index0=5), sysfs=None,
         expect=dict(source='show_gids', env={'NCCL_IB_HCA': '=rocep1s0f0', 'NCCL_IB_GID_INDEX': '5', 'VLLM_HOST_IP': IP0})),
    dict(id='show_gids absent -> sysfs', args=dict(fabric_ipv4=[IP0]), show_gids=None, sysfs=spark_rows(index0=7),
         expect=dict(source='sysfs', env={'NCCL_IB_HCA': '=rocep1s0f0', 'NCCL_IB_GID_INDEX': '7', 'GLOO_SOCKET_IFNAME': 'enp1s0f0np0'})),
    dict(id='show_gids fails -> sysfs with warning', args=dict(fabric_ipv4=[IP0]), show_gids=(1, '', 'boom'), sysfs=spark_rows(),
         expect=dict(source='sysfs', env={'NCCL_IB_GID_INDEX': '3'}, problem='exited 1 (boom)')),
    dict(id='two rails common index', args=dict(fabric_ipv4=[IP0, IP1]), show_gids=None, sysfs=spark_rows(),
         expect=dict(source='sysfs', env=SPARK_ENV, exact_env=True, gid_index=3)),
    dict(id='two rails as comma string', args=dict(fabric_ipv4='%s,%s' % (IP0, IP1)), show_gids=None, sysfs=spark_rows(),
         expect=dict(source='sysfs', env=SPARK_ENV, exact_env=True)),
    dict(id='two rails no common index -> failure', args=dict(fabric_ipv4=[IP0, IP1]), show_gids=None, sysfs=spark_rows(3, 5),
         expect=dict(failed=True, msg=['no common RoCE v2 GID index', IP0, IP1, 'index 3', 'index 5', 'nccl_gid_auto'])),
    dict(id='two rails no common index + nccl_gid_auto', args=dict(fabric_ipv4=[IP0, IP1], nccl_gid_auto=True), show_gids=None,
         sysfs=spark_rows(3, 5),
         expect=dict(source='sysfs', gid_index=None, absent=['NCCL_IB_GID_INDEX'],
                     env={'NCCL_IB_ADDR_FAMILY': 'AF_INET', 'NCCL_IB_ROCE_VERSION_NUM': '2', 'NCCL_IB_HCA': '=rocep1s0f0,roceP2p1s0f0'})),
    dict(id='v1-only address -> hint', args=dict(fabric_ipv4=[IP0]), show_gids=None, sysfs=spark_rows(v2=False),
         expect=dict(failed=True, msg=[IP0, 'exists only as RoCE v1', 'rocep1s0f0 port 1 index 2 (v1'])),
    dict(id='absent address -> hint', args=dict(fabric_ipv4=['10.9.9.9']), show_gids=None, sysfs=spark_rows(),
         expect=dict(failed=True, msg=['10.9.9.9', 'no GID carries this address', 'ibdev2netdev', 'ibstat', IP0, IP1])),
    dict(id='no rdma device in sysfs', args=dict(fabric_ipv4=[IP0]), show_gids=None, sysfs=[],
         expect=dict(failed=True, msg=[IP0, 'no GIDs at all', 'class/infiniband'])),
    dict(id='unparseable output', args=dict(fabric_ipv4=[IP0], show_gids_output='Segmentation fault (core dumped)\n'),
         show_gids=None, sysfs=None,
         expect=dict(failed=True, no_command=True, msg=[IP0, 'unparseable', 'Segmentation fault'])),
    dict(id='unparseable show_gids stdout', args=dict(fabric_ipv4=[IP0]), show_gids=(0, 'Usage: show_gids [-h]\n', ''), sysfs=None,
         expect=dict(failed=True, msg=[IP0, 'show_gids output is unparseable'])),
    dict(id='empty show_gids_output', args=dict(fabric_ipv4=[IP0], show_gids_output=''), show_gids=None, sysfs=None,
         expect=dict(failed=True, no_command=True, msg=[IP0, 'no GIDs at all'])),
    dict(id='show_gids_output given -> nothing runs', args=dict(fabric_ipv4=[IP1], show_gids_output=show_gids_text(spark_rows())),
         show_gids=spark_rows(index1=9), sysfs=None,
         expect=dict(source='show_gids_output', no_command=True, env={'NCCL_IB_HCA': '=roceP2p1s0f0', 'NCCL_IB_GID_INDEX': '3'})),
    dict(id='hca filter', args=dict(fabric_ipv4=[IP1], hca=['rocep1s0f0']), show_gids=None, sysfs=spark_rows(),
         expect=dict(failed=True, msg=[IP1, 'outside the hca filter rocep1s0f0'])),
    dict(id='socket_ifname override', args=dict(fabric_ipv4=[IP0], socket_ifname='enp1s0f1np1'), show_gids=None, sysfs=spark_rows(),
         expect=dict(source='sysfs', env={'NCCL_SOCKET_IFNAME': '=enp1s0f1np1', 'GLOO_SOCKET_IFNAME': 'enp1s0f1np1',
                                          'TP_SOCKET_IFNAME': 'enp1s0f1np1'})),
    dict(id='bootstrap network (a triangle)', args=dict(fabric_ipv4=[IP0], socket_ifname='enP7s7', host_ip='192.168.1.11'),
         show_gids=None, sysfs=spark_rows(),
         expect=dict(source='sysfs', env={'NCCL_SOCKET_IFNAME': '=enP7s7', 'GLOO_SOCKET_IFNAME': 'enP7s7',
                                          'TP_SOCKET_IFNAME': 'enP7s7', 'VLLM_HOST_IP': '192.168.1.11'})),
    dict(id='bad fabric_ipv4', args=dict(fabric_ipv4=['spark-01']), show_gids=None, sysfs=spark_rows(),
         expect=dict(failed=True, msg=["'spark-01' is not an IPv4 address"])),
    dict(id='redacted gid reported', args=dict(fabric_ipv4=[IP0]), show_gids=None, sysfs=None,
         show_gids_output=show_gids_text(spark_rows()).replace(mapped(IP1), '0000:0000:0000:0000:0000:ffff:xxxx:xxxx'),
         expect=dict(source='show_gids_output', env={'NCCL_IB_GID_INDEX': '3'}, problem='redacted')),
]


@pytest.mark.parametrize('case', [pytest.param(case, id=case['id']) for case in CASES])
@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check'])
def test_module(case, check_mode, tmp_path):
    args = dict(case['args'])
    if case.get('show_gids_output') is not None:
        args['show_gids_output'] = case['show_gids_output']
    if case['sysfs'] is not None:
        make_sysfs(tmp_path, case['sysfs'])
        args['sysfs_root'] = str(tmp_path)
    else:
        args['sysfs_root'] = str(tmp_path / 'no-sysfs')
    if check_mode:
        args['_ansible_check_mode'] = True
    show_gids = case['show_gids']
    if show_gids is None:
        bin_path, command = None, None
    elif isinstance(show_gids, tuple):
        bin_path, command = '/usr/sbin/show_gids', show_gids
    else:
        bin_path, command = '/usr/sbin/show_gids', (0, show_gids_text(show_gids), '')

    result, get_bin_path, run_command = run_module(args, bin_path, command)
    expect = case['expect']

    if expect.get('no_command'):
        get_bin_path.assert_not_called()
        run_command.assert_not_called()
    elif bin_path:
        run_command.assert_called_once()
        assert run_command.call_args.args[0] == ['/usr/sbin/show_gids']
        assert run_command.call_args.kwargs['environ_update']['LC_ALL'] == 'C'

    if expect.get('failed'):
        assert result.get('failed'), result
        for fragment in expect['msg']:
            assert fragment in result['msg'], (fragment, result['msg'])
        assert 'Traceback' not in result['msg']
        return

    assert not result.get('failed'), result.get('msg')
    assert result['changed'] is False
    assert result['source'] == expect['source']
    facts = result['ansible_facts']
    env = facts['nccl_env']
    if expect.get('exact_env'):
        assert env == expect['env']
    else:
        for key, value in expect['env'].items():
            assert env[key] == value, key
    for key in expect.get('absent', ()):
        assert key not in env
    assert all(isinstance(value, str) and value for value in env.values())
    for key in ('NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME', 'GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'VLLM_HOST_IP'):
        assert key in env
    if 'gid_index' in expect:
        assert result['gid_index'] == expect['gid_index']
    if 'problem' in expect:
        assert any(expect['problem'] in problem for problem in result['problems']), result['problems']
    rows = facts['roce_gids']
    assert rows and all(set(row) == {'device', 'port', 'index', 'gid', 'ipv4', 'version', 'netdev'} for row in rows)
    assert (args.get('host_ip') or result['rails'][0]['ipv4']) == env['VLLM_HOST_IP']


def test_sysfs_table_equals_show_gids_table(tmp_path):
    make_sysfs(tmp_path, spark_rows())
    from_sysfs, _g, _r = run_module(dict(fabric_ipv4=[IP0, IP1], sysfs_root=str(tmp_path)))
    from_text, _g, _r = run_module(dict(fabric_ipv4=[IP0, IP1], show_gids_output=show_gids_text(spark_rows())))

    def key(row):
        return (row['device'], row['port'], row['index'])
    assert sorted(from_sysfs['ansible_facts']['roce_gids'], key=key) == sorted(from_text['ansible_facts']['roce_gids'], key=key)
    assert from_sysfs['ansible_facts']['nccl_env'] == from_text['ansible_facts']['nccl_env'] == SPARK_ENV


# ---------------------------------------------------------------------------
# through ansible itself

def _ansible_bin():
    pytest.importorskip('ansible')
    candidate = Path(sys.executable).parent / 'ansible'
    if not candidate.exists():
        pytest.skip('no ansible CLI next to %s' % sys.executable)
    return str(candidate)


def run_adhoc(tmp_path, module_args):
    env = dict(os.environ)
    env.update({
        'ANSIBLE_COLLECTIONS_PATH': str(REPO_ROOT / 'collections'),
        'ANSIBLE_LOAD_CALLBACK_PLUGINS': '1',
        'ANSIBLE_STDOUT_CALLBACK': 'json',
        'ANSIBLE_LOCAL_TEMP': str(tmp_path / 'local-tmp'),
        'ANSIBLE_REMOTE_TEMP': str(tmp_path / 'remote-tmp'),
        'ANSIBLE_CONFIG': str(tmp_path / 'no-ansible.cfg'),
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_DEPRECATION_WARNINGS': '0',
    })
    cmd = [_ansible_bin(), 'localhost', '-i', 'localhost,', '-c', 'local', '-m', 'dgxspark.cluster.roce_gid_facts',
           '-a', json.dumps(module_args), '-e', 'ansible_python_interpreter=%s' % sys.executable]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=180, check=False)
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        pytest.fail('ansible did not print JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr))
    return proc.returncode, output['plays'][0]['tasks'][0]['hosts']['localhost']


@pytest.mark.integration
def test_through_ansible_on_a_capture(tmp_path):
    text = capture('show_gids', '04-multiple-ipv4-same-netdev.txt').read_bytes().decode('utf-8')
    body = text.split('\n\n', 1)[1]
    rc, result = run_adhoc(tmp_path, {'fabric_ipv4': ['10.22.116.222'], 'show_gids_output': body})
    assert rc == 0, result
    facts = result['ansible_facts']
    assert facts['nccl_env'] == {
        'NCCL_IB_HCA': '=mlx5_1',
        'NCCL_IB_GID_INDEX': '5',
        'NCCL_SOCKET_IFNAME': '=enp61s0f1np1',
        'GLOO_SOCKET_IFNAME': 'enp61s0f1np1',
        'TP_SOCKET_IFNAME': 'enp61s0f1np1',
        'VLLM_HOST_IP': '10.22.116.222',
    }
    assert len(facts['roce_gids']) == 10
    assert result['source'] == 'show_gids_output'
    assert result['changed'] is False


@pytest.mark.integration
def test_through_ansible_fails_cleanly(tmp_path):
    if any(Path(d, 'show_gids').exists() for d in os.environ.get('PATH', '').split(os.pathsep) + ['/sbin', '/usr/sbin', '/usr/local/sbin']):
        pytest.skip('show_gids is installed here: the module would read the real table instead of the test sysfs tree')
    make_sysfs(tmp_path / 'sys', spark_rows(v2=False))
    rc, result = run_adhoc(tmp_path, {'fabric_ipv4': [IP0], 'sysfs_root': str(tmp_path / 'sys'), 'show_gids_output': None})
    assert rc != 0
    assert result['failed'] is True
    assert IP0 in result['msg'] and 'exists only as RoCE v1' in result['msg']
    assert 'Traceback' not in json.dumps(result)
