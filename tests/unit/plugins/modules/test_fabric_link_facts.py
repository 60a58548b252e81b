# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/fabric_link_facts.py, run against the sim's stand-ins (ibdev2netdev, ibstat,
ethtool read the stand-in sysfs tree rdma.write_sysfs makes) and tiny fake tools for the failures."""

from __future__ import absolute_import, division, print_function

import sys
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import fabric_link_facts
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

REPO_ROOT = Path(__file__).resolve().parents[4]
NODE = REPO_ROOT / 'sim' / 'node'
if str(NODE / 'usr' / 'lib' / 'spark-sim') not in sys.path:
    sys.path.insert(0, str(NODE / 'usr' / 'lib' / 'spark-sim'))

from sparksim import rdma, state as statefile  # noqa: E402

RAILS = [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.1'}, {'netdev': 'enP2p1s0f1np1', 'ipv4': '192.168.105.1'}]
SLOT_LINE = ('[    5.100000] mlx5_core 0002:01:00.1: mlx5_pcie_event:326:(pid 3202): '
             'Detected insufficient power on the PCIe slot (27W).')


def run_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            fabric_link_facts.main()
    return excinfo.value.args[0]


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp('spark')
    hcas = rdma.default_hcas('spark-head', RAILS)
    hcas[3]['pcie_link_width'] = 2                      # roceP2p1s0f1: the early GX10 BIOS wiring
    for hca in hcas:
        hca['ports'][0]['gid_tbl_len'] = 8
    state = {'version': 1, 'hostname': 'spark-head', 'hcas': hcas, 'sysfs_root': str(base / 'sys')}
    statefile.save(state, str(base / 'state.json'))
    rdma.write_sysfs(state, str(base / 'sys'))
    return base


@pytest.fixture()
def tools(tree, tmp_path, monkeypatch):
    """PATH: the stand-ins, a journalctl printing the mlx5 slot-power line; returns a function to add fakes."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for tool in ('usr/bin/ibdev2netdev', 'usr/sbin/ibstat', 'usr/sbin/ethtool'):
        (bin_dir / Path(tool).name).symlink_to(NODE / tool)
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % bin_dir)
    monkeypatch.setenv('SPARK_SIM_SYSFS', str(tree / 'sys'))
    monkeypatch.setenv('SPARK_SIM_STATE', str(tree / 'state.json'))

    def fake(name, script):
        path = bin_dir / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text('#!/bin/sh\n' + script)
        path.chmod(0o755)
    fake('journalctl', "printf '%s\\n' '" + SLOT_LINE + "'\n")
    return fake


def args(tree, **extra):
    base = dict(rails=RAILS, mtu=9000, sysfs_root=str(tree / 'sys'), pcie_sysfs_root=str(tree / 'sys'))
    base.update(extra)
    return base


def test_healthy_twins_x2_is_a_warning_and_the_slot_line_is_information(tree, tools):
    result = run_module(args(tree))
    assert result['healthy'] is True, result['problems']
    links = result['ansible_facts']['fabric_links']
    assert [(l['device'], l['pci'], l['pcie_link_speed'], l['pcie_link_width']) for l in links] == [
        ('rocep1s0f1', '0000:01:00.1', '32.0 GT/s PCIe', '4'), ('roceP2p1s0f1', '0002:01:00.1', '32.0 GT/s PCIe', '2')]
    assert len(result['warnings_list']) == 1 and 'early GX10 BIOS' in result['warnings_list'][0]
    assert result['slot_power'] == {'0002:01:00.1': '27W'}
    # the firmware ibstat prints (fw_ver of the stand-in tree), for the cross-node firmware report
    assert [l['firmware'] for l in links] == ['28.45.4028', '28.45.4028']


def test_firmware_facts_reads_the_esrt_the_sim_writes(tree):
    """firmware_facts on the tree rdma.write_sysfs made (sparksim.firmware: the kernel's esrt.c formats)."""
    from ansible_collections.dgxspark.cluster.plugins.modules import firmware_facts
    with patch_module_args({'sysfs_root': str(tree / 'sys')}), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            firmware_facts.main()
    result = excinfo.value.args[0]
    assert result['changed'] is False and result['failed_updates'] == []
    assert [(e['entry'], e['fw_type'], e['last_attempt_status']) for e in result['esrt']] == [('entry0', 1, 0)]
    assert list(result['summary'].values()) == ['system firmware 65539']


def test_ibpanic_fails_the_rail_it_names_even_with_output(tree, tools):
    real = NODE / 'usr' / 'sbin' / 'ibstat'
    tools('ibstat', '"%s" "%s" "$@"\necho "ibpanic: [123] main: stat of IB device \'roceP2p1s0f1\' failed: '
                    'Input/output error" >&2\nexit 255\n' % (sys.executable, real))
    result = run_module(args(tree))
    assert result['healthy'] is False
    first, second = result['ansible_facts']['fabric_links']
    assert any('ibpanic' in p and 'roceP2p1s0f1' in p for p in second['problems']), second['problems']
    assert any('exited 255' in p for p in first['problems'] + second['problems'])


def test_a_tool_that_exits_non_zero_fails_the_rail(tree, tools):
    tools('ethtool', 'echo "Settings for $1:"; echo "	Speed: 200000Mb/s"; echo "netlink error: Operation not permitted" >&2; exit 75\n')
    result = run_module(args(tree))
    assert result['healthy'] is False
    for link in result['ansible_facts']['fabric_links']:
        assert any('ethtool %s exited 75' % link['netdev'] in p for p in link['problems']), link['problems']


def test_pcie_speed_below_gen5_is_a_problem(tree, tools, tmp_path):
    sysfs = tmp_path / 'sys'
    import shutil
    shutil.copytree(str(tree / 'sys'), str(sysfs), symlinks=True)
    (sysfs / 'bus' / 'pci' / 'devices' / '0000:01:00.1' / 'current_link_speed').write_text('16.0 GT/s PCIe\n')
    result = run_module(args(tree, pcie_sysfs_root=str(sysfs)))
    problems = result['ansible_facts']['fabric_links'][0]['problems']
    assert any("PCIe link speed is '16.0 GT/s PCIe', expected 32.0 GT/s" in p for p in problems), problems
    assert run_module(args(tree, pcie_sysfs_root=str(sysfs), pcie_check=False))['ansible_facts']['fabric_links'][0]['problems'] == []
