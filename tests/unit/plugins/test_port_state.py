# -*- coding: utf-8 -*-
"""Port states in the GID resolution: the parser (plugins/module_utils/roce_gids.py), the node-side
resolver (roles/nic/files/dgxspark_nccl_resolve.py) and the module roce_gid_facts, against fake sysfs
trees shaped like a DGX Spark.

A Spark's ConnectX-7 shows four RDMA devices: the f0 pair (rocep1s0f0 / roceP2p1s0f0, netdevs
enp1s0f0np0 / enP2p1s0f0np0) and the f1 pair (rocep1s0f1 / roceP2p1s0f1, enp1s0f1np1 /
enP2p1s0f1np1), the PCIe twins of each QSFP port. NCCL uses only ACTIVE ports, but the kernel removes
a GID only with its address or its netdev: a port whose cable was pulled keeps its RoCE GIDs while the
static address stays. Here the f0 pair is DOWN but still addressed, the f1 pair ACTIVE.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.module_utils import roce_gids as rg
from ansible_collections.dgxspark.cluster.plugins.modules import roce_gid_facts
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

REPO_ROOT = Path(__file__).resolve().parents[3]
RESOLVER = REPO_ROOT / 'roles' / 'nic' / 'files' / 'dgxspark_nccl_resolve.py'
LIB_DIR = REPO_ROOT / 'plugins' / 'module_utils'

# device, netdev, link-local GID
SPARK = [
    ('rocep1s0f0', 'enp1s0f0np0', 'fe80:0000:0000:0000:4ebb:47ff:fe00:0010'),
    ('rocep1s0f1', 'enp1s0f1np1', 'fe80:0000:0000:0000:4ebb:47ff:fe00:0011'),
    ('roceP2p1s0f0', 'enP2p1s0f0np0', 'fe80:0000:0000:0000:4ebb:47ff:fe00:0020'),
    ('roceP2p1s0f1', 'enP2p1s0f1np1', 'fe80:0000:0000:0000:4ebb:47ff:fe00:0021'),
]
STATE_TEXT = {'ACTIVE': '4: ACTIVE\n', 'DOWN': '1: DOWN\n', 'INIT': '2: INIT\n'}


def mapped(ipv4):
    a, b, c, d = (int(x) for x in ipv4.split('.'))
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % (a, b, c, d)


def make_spark(root, addresses, states, link_layers=None, index=3):
    """A Spark tree: ``addresses`` {device: [ipv4, ...]} (GID pairs index-1/index, index+1/index+2, ...),
    ``states`` {device: 'ACTIVE' | 'DOWN' | None (no state file)}."""
    link_layers = link_layers or {}
    for device, netdev, link_local in SPARK:
        port_dir = root / 'class' / 'infiniband' / device / 'ports' / '1'
        for sub in ('gids', 'gid_attrs/types', 'gid_attrs/ndevs'):
            (port_dir / sub).mkdir(parents=True, exist_ok=True)
        rows = [(0, link_local, 'IB/RoCE v1'), (1, link_local, 'RoCE v2')]
        for n, address in enumerate(addresses.get(device, [])):
            rows += [(index - 1 + 2 * n, mapped(address), 'IB/RoCE v1'), (index + 2 * n, mapped(address), 'RoCE v2')]
        for slot in range(16):
            (port_dir / 'gids' / str(slot)).write_text('0000:0000:0000:0000:0000:0000:0000:0000\n')
        for slot, gid, kind in rows:
            (port_dir / 'gids' / str(slot)).write_text(gid + '\n')
            (port_dir / 'gid_attrs' / 'types' / str(slot)).write_text(kind + '\n')
            (port_dir / 'gid_attrs' / 'ndevs' / str(slot)).write_text(netdev + '\n')
        state = states.get(device, 'ACTIVE')
        if state is not None:
            (port_dir / 'state').write_text(STATE_TEXT.get(state, '5: %s\n' % state))
        (port_dir / 'link_layer').write_text(link_layers.get(device, 'Ethernet') + '\n')
    return root


F0_DOWN = {'rocep1s0f0': 'DOWN', 'roceP2p1s0f0': 'DOWN', 'rocep1s0f1': 'ACTIVE', 'roceP2p1s0f1': 'ACTIVE'}
A0, A1, B0, B1 = '192.168.100.10', '192.168.101.10', '192.168.110.10', '192.168.111.10'


def resolve_tree(root, fabric, hca=None, nccl_gid_auto=False):
    return rg.build_nccl_env(rg.read_sysfs_gids(str(root)), fabric, hca=hca, nccl_gid_auto=nccl_gid_auto,
                             port_states=rg.read_port_states(str(root)))


# --------------------------------------------------------------------------- the parser

def test_read_port_states_of_a_spark(tmp_path):
    root = make_spark(tmp_path, {}, dict(F0_DOWN, roceP2p1s0f1=None))
    states = rg.read_port_states(str(root))
    assert states[('rocep1s0f0', 1)] == {'state': 'DOWN', 'link_layer': 'Ethernet'}
    assert states[('rocep1s0f1', 1)] == {'state': 'ACTIVE', 'link_layer': 'Ethernet'}
    assert states[('roceP2p1s0f1', 1)] == {'state': None, 'link_layer': 'Ethernet'}
    assert rg.read_port_states(str(tmp_path / 'nowhere')) == {}


def test_f0_pair_down_but_addressed_fails_closed_naming_port_and_state(tmp_path):
    """The declared rails are on the f0 pair, whose cable is out: no candidate, never the dead netdev."""
    root = make_spark(tmp_path, {'rocep1s0f0': [A0], 'roceP2p1s0f0': [A1]}, F0_DOWN)
    with pytest.raises(rg.RoceGidError) as raised:
        resolve_tree(root, [A0, A1])
    msg = raised.value.msg
    for fragment in (A0, A1, 'rocep1s0f0 port 1', 'roceP2p1s0f0 port 1', 'state DOWN', 'enp1s0f0np0', 'ACTIVE'):
        assert fragment in msg, (fragment, msg)
    # Without the states (the old behaviour) the same tree resolves to the dead ports.
    old = rg.build_nccl_env(rg.read_sysfs_gids(str(root)), [A0, A1])
    assert old['env']['NCCL_IB_HCA'] == '=rocep1s0f0,roceP2p1s0f0'


def test_mixed_rails_one_on_the_down_pair(tmp_path):
    """Rail 1 on the DOWN f0, rail 2 on the ACTIVE roceP2p1s0f1: the resolver used to write =rocep1s0f0,roceP2p1s0f1."""
    root = make_spark(tmp_path, {'rocep1s0f0': [A0], 'roceP2p1s0f1': [B1]}, F0_DOWN)
    with pytest.raises(rg.RoceGidError) as raised:
        resolve_tree(root, [A0, B1])
    assert 'rocep1s0f0 port 1 (netdev enp1s0f0np0, state DOWN)' in raised.value.msg
    assert B1 not in raised.value.msg.split('. ')[1]  # only the failing rail is explained


def test_same_address_on_down_f0_and_active_f1_takes_the_active_port(tmp_path):
    """NCCL sees only the ACTIVE one: no 'carried by several ports'."""
    root = make_spark(tmp_path, {'rocep1s0f0': [A0], 'rocep1s0f1': [A0], 'roceP2p1s0f1': [A1]}, F0_DOWN)
    resolution = resolve_tree(root, [A0, A1])
    env = resolution['env']
    assert env['NCCL_IB_HCA'] == '=rocep1s0f1,roceP2p1s0f1'
    assert env['NCCL_SOCKET_IFNAME'] == '=enp1s0f1np1'
    assert env['GLOO_SOCKET_IFNAME'] == env['TP_SOCKET_IFNAME'] == 'enp1s0f1np1'
    assert env['NCCL_IB_GID_INDEX'] == '3'
    assert 'skipped rocep1s0f0 port 1 (state DOWN)' in resolution['summary']
    # and with the f0 port ACTIVE too, the address really is ambiguous
    root2 = make_spark(tmp_path / 'all-up', {'rocep1s0f0': [A0], 'rocep1s0f1': [A0]}, {})
    with pytest.raises(rg.RoceGidError, match='carried by several ports'):
        resolve_tree(root2, [A0])


def test_unreadable_state_keeps_the_port_a_candidate(tmp_path):
    root = make_spark(tmp_path, {'rocep1s0f1': [B0]}, {'rocep1s0f1': None})
    assert resolve_tree(root, [B0])['env']['NCCL_IB_HCA'] == '=rocep1s0f1'
    assert rg.port_unusable({('rocep1s0f1', 1): {'state': None, 'link_layer': None}}, 'rocep1s0f1', 1) == ''
    assert rg.port_unusable({}, 'rocep1s0f1', 1) == ''


@pytest.mark.parametrize('state', ['INIT', 'ARMED'])
def test_other_states_than_active_are_no_candidates(tmp_path, state):
    root = make_spark(tmp_path, {'rocep1s0f1': [B0]}, {'rocep1s0f1': state})
    with pytest.raises(rg.RoceGidError, match='state %s' % state):
        resolve_tree(root, [B0])


def test_a_port_whose_link_layer_is_not_ethernet_is_no_candidate(tmp_path):
    root = make_spark(tmp_path, {'rocep1s0f1': [B0]}, {}, link_layers={'rocep1s0f1': 'InfiniBand'})
    with pytest.raises(rg.RoceGidError, match='link layer InfiniBand'):
        resolve_tree(root, [B0])


@pytest.mark.parametrize('hca', [['^rocep1s0f0,roceP2p1s0f0'], ['^rocep1s0f0'], ['=^rocep1s0f0'], ['rocep1s0f1,^rocep1s0f0']])
def test_nccl_exclude_form_is_refused(tmp_path, hca):
    root = make_spark(tmp_path, {'rocep1s0f1': [B0]}, F0_DOWN)
    with pytest.raises(rg.RoceGidError) as raised:
        resolve_tree(root, [B0], hca=hca)
    assert "exclude form (^dev)" in raised.value.msg and hca[0] in raised.value.msg


def test_several_ports_message_lists_every_gid_on_them(tmp_path):
    root = make_spark(tmp_path, {'rocep1s0f0': [B0], 'rocep1s0f1': [B0]}, {})
    with pytest.raises(rg.RoceGidError) as raised:
        resolve_tree(root, [B0])
    msg = raised.value.msg
    assert 'carried by several ports' in msg
    for device in ('rocep1s0f0', 'rocep1s0f1'):
        listed = msg.split('%s port 1: ' % device)[-1]
        for fragment in ('idx 0 v1 fe80:', 'idx 1 v2 fe80:', 'idx 2 v1 %s' % B0, 'idx 3 v2 %s' % B0):
            assert fragment in listed, (device, fragment, msg)


def test_no_common_index_message_lists_every_gid_on_the_rails(tmp_path):
    root = make_spark(tmp_path / 'a', {'rocep1s0f1': [B0]}, F0_DOWN)
    make_spark(tmp_path / 'b', {'roceP2p1s0f1': ['192.168.99.9', B1]}, F0_DOWN)  # B1 lands at index 5
    entries = [e for e in rg.read_sysfs_gids(str(tmp_path / 'a')) if e['device'] == 'rocep1s0f1']
    entries += [e for e in rg.read_sysfs_gids(str(tmp_path / 'b')) if e['device'] == 'roceP2p1s0f1']
    with pytest.raises(rg.RoceGidError) as raised:
        rg.build_nccl_env(entries, [B0, B1], port_states=rg.read_port_states(str(root)))
    msg = raised.value.msg
    assert 'no common RoCE v2 GID index' in msg
    tail = msg.split('Every GID on the rails: ')[1]
    for fragment in ('rocep1s0f1 port 1: idx 0 v1 fe80:', 'idx 3 v2 %s' % B0, 'roceP2p1s0f1 port 1: idx 0 v1 fe80:',
                     'idx 3 v2 192.168.99.9', 'idx 4 v1 %s' % B1, 'idx 5 v2 %s' % B1):
        assert fragment in tail, (fragment, tail)


# --------------------------------------------------------------------------- the node-side resolver

def run_resolver(tmp_path, *args):
    env = dict(os.environ, DGXSPARK_LIB=str(LIB_DIR))
    cmd = [sys.executable, str(RESOLVER), '--show-gids-cmd', ''] + [str(a) for a in args]
    return subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60, check=False)


def test_resolver_skips_the_down_pair_and_fails_closed(tmp_path):
    root = make_spark(tmp_path / 'sys', {'rocep1s0f0': [A0], 'rocep1s0f1': [A0]}, F0_DOWN)
    out = tmp_path / 'nccl.env'
    proc = run_resolver(tmp_path, '--fabric-ipv4', A0, '--sysfs-root', root, '--output', out)
    assert proc.returncode == 0, proc.stderr
    assert rg.parse_env_file(out.read_text())['NCCL_IB_HCA'] == '=rocep1s0f1'
    assert 'skipped rocep1s0f0 port 1 (state DOWN)' in proc.stderr
    # the cable of f1 is pulled too: fail closed, the stale file removed
    (root / 'class' / 'infiniband' / 'rocep1s0f1' / 'ports' / '1' / 'state').write_text('1: DOWN\n')
    proc = run_resolver(tmp_path, '--fabric-ipv4', A0, '--sysfs-root', root, '--output', out)
    assert proc.returncode == 1
    assert 'rocep1s0f1 port 1 (netdev enp1s0f1np1, state DOWN)' in proc.stderr
    assert not out.exists()


def test_resolver_reads_the_states_from_sysfs_when_show_gids_gives_the_table(tmp_path):
    root = make_spark(tmp_path / 'sys', {'rocep1s0f0': [A0], 'rocep1s0f1': [A0]}, F0_DOWN)
    fake = tmp_path / 'show_gids'
    rows = rg.read_sysfs_gids(str(root))
    lines = ['DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV']
    lines += ['%s\t%d\t%d\t%s\t%s\t%s\t%s' % (r['device'], r['port'], r['index'], r['gid'], r['ipv4'] and r['ipv4'] + '  ',
                                              r['version'], r['netdev']) for r in rows]
    lines.append('n_gids_found=%d' % len(rows))
    fake.write_text('#!/bin/sh\ncat <<"EOF"\n%s\nEOF\n' % '\n'.join(lines))
    fake.chmod(0o755)
    env = dict(os.environ, DGXSPARK_LIB=str(LIB_DIR))
    proc = subprocess.run([sys.executable, str(RESOLVER), '--show-gids-cmd', str(fake), '--fabric-ipv4', A0,
                           '--sysfs-root', str(root), '--output', '-'], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert 'from %s' % fake in proc.stderr
    assert rg.parse_env_file(proc.stdout)['NCCL_IB_HCA'] == '=rocep1s0f1'


def test_resolver_refuses_the_exclude_form(tmp_path):
    root = make_spark(tmp_path / 'sys', {'rocep1s0f1': [B0]}, F0_DOWN)
    proc = run_resolver(tmp_path, '--fabric-ipv4', B0, '--sysfs-root', root, '--hca', '^rocep1s0f0', '--output', '-')
    assert proc.returncode == 1
    assert 'exclude form' in proc.stderr and 'Traceback' not in proc.stderr


# --------------------------------------------------------------------------- the module

def run_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', return_value=None):
        try:
            roce_gid_facts.main()
        except (ExitJson, FailJson) as exc:
            return exc.args[0]
    raise AssertionError('the module returned without exit_json/fail_json')  # pragma: no cover


def test_module_skips_down_ports_and_names_them(tmp_path):
    root = make_spark(tmp_path, {'rocep1s0f0': [A0], 'rocep1s0f1': [A0]}, F0_DOWN)
    result = run_module(dict(fabric_ipv4=[A0], sysfs_root=str(root)))
    assert not result.get('failed'), result
    assert result['ansible_facts']['nccl_env']['NCCL_IB_HCA'] == '=rocep1s0f1'
    result = run_module(dict(fabric_ipv4=[A0], sysfs_root=str(root), hca=['rocep1s0f0']))
    assert result['failed'] and 'rocep1s0f0 port 1 (netdev enp1s0f0np0, state DOWN)' in result['msg']
    result = run_module(dict(fabric_ipv4=[A0], sysfs_root=str(root), hca=['^rocep1s0f0']))
    assert result['failed'] and 'exclude form' in result['msg']
