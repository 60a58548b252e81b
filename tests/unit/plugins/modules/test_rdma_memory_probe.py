# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/rdma_memory_probe.py against the sim's ib_write_bw stand-in (loopback on 127.0.0.1).

The node's kernel is the stand-in /proc (osrelease, cmdline) and /boot (config-<release>) the module reads and the
stand-in's registration reads (sparksim/kernel.py): 7.0.0-1019-nvidia with KHO on fails with ENOMEM until kho=off.
"""

from __future__ import absolute_import, division, print_function

import fcntl
import os
import socket
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import rdma_memory_probe
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

REPO_ROOT = Path(__file__).resolve().parents[4]
TOOL = REPO_ROOT / 'sim' / 'node' / 'usr' / 'bin' / 'ib_write_bw'
NODE_LIB = REPO_ROOT / 'sim' / 'node' / 'usr' / 'lib' / 'spark-sim'
if str(NODE_LIB) not in sys.path:
    sys.path.insert(0, str(NODE_LIB))

from sparksim import kernel, rdma, state as statefile  # noqa: E402

STOCK = '6.17.0-1014-nvidia'
CMDLINE = 'BOOT_IMAGE=/boot/vmlinuz-%s root=LABEL=spark-sim ro quiet splash'


def run_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            rdma_memory_probe.main()
    return excinfo.value.args[0]


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture(scope='module')
def sysfs(tmp_path_factory):
    root = tmp_path_factory.mktemp('node')
    hcas = rdma.default_hcas('spark-worker', [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.2'},
                                              {'netdev': 'enP2p1s0f1np1', 'ipv4': '192.168.105.2'}])
    for hca in hcas:
        for port in hca['ports']:
            port['gid_tbl_len'] = 16
    state = {'version': 1, 'hostname': 'spark-worker', 'hcas': hcas, 'sysfs_root': str(root / 'sys'),
             'nic': {'throttled': False, 'throttle_persists': False}}
    statefile.save(state, str(root / 'state.json'))
    rdma.write_sysfs(state, str(root / 'sys'))
    return root


@pytest.fixture()
def node(sysfs, tmp_path, monkeypatch):
    """Returns a function that boots the node into a kernel with a command line."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'ib_write_bw').symlink_to(TOOL)
    monkeypatch.setenv('PATH', str(bin_dir))
    monkeypatch.setenv('SPARK_SIM_IB_WRITE_BW_MAX_SLEEP', '0.05')
    monkeypatch.setenv('SPARK_SIM_STATE', str(sysfs / 'state.json'))
    monkeypatch.setenv('SPARK_SIM_SYSFS', str(sysfs / 'sys'))
    proc, boot = tmp_path / 'proc', tmp_path / 'boot'
    (proc / 'sys' / 'kernel').mkdir(parents=True)
    boot.mkdir()
    monkeypatch.setenv('SPARK_SIM_PROC', str(proc))
    monkeypatch.setenv('SPARK_SIM_BOOT_DIR', str(boot))

    def boot_into(release, extra=''):
        (proc / 'sys' / 'kernel' / 'osrelease').write_text(release + '\n')
        (proc / 'cmdline').write_text((CMDLINE % release + ' ' + extra).strip() + '\n')
        if release == kernel.KHO_KERNEL:
            (boot / ('config-' + release)).write_text(kernel.KHO_CONFIG)
        return dict(node='spark-worker', netdevs=['enp1s0f1np1', 'enP2p1s0f1np1'], sysfs_root=str(sysfs / 'sys'),
                    proc_root=str(proc), boot_dir=str(boot), tcp_port=free_port(), timeout=20, size=1048576,
                    lock_file=str(tmp_path / 'probe.lock'))
    return boot_into


@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check'])
def test_stock_kernel_registers_on_every_rail(node, check_mode):
    module_args = node(STOCK)
    module_args['_ansible_check_mode'] = check_mode
    result = run_module(module_args)
    assert result['changed'] is False
    assert result['problem'] == ''
    assert result['devices'] == {'enp1s0f1np1': 'rocep1s0f1', 'enP2p1s0f1np1': 'roceP2p1s0f1'}
    assert [v['registered'] for v in result['verdicts']] == [True, True]
    assert result['kernel'] == STOCK and result['kho']['active'] is None     # no config-<release>: unknown


def test_kernel_7_with_kho_fails_with_enomem_naming_node_and_remedy(node):
    result = run_module(node(kernel.KHO_KERNEL))
    assert result['kho'] == {'compiled': True, 'default': True, 'cmdline': [], 'active': True}
    assert [v['errno'] for v in result['verdicts']] == [12, 12]
    msg = result['problem']
    assert msg.startswith('spark-worker (kernel 7.0.0-1019-nvidia): RDMA memory registration failed on rocep1s0f1, '
                          'roceP2p1s0f1 (ib_write_bw loopback registering 2097152 bytes')
    assert 'ENOMEM (Cannot allocate memory' in msg and 'kho=off' in msg


def test_kernel_7_with_kho_off_passes(node):
    result = run_module(node(kernel.KHO_KERNEL, 'kho=off'))
    assert result['problem'] == ''
    assert result['kho']['active'] is False


def test_a_rail_whose_port_is_down_is_not_probed_and_says_why(node):
    module_args = node(STOCK)
    module_args['netdevs'] = ['enp1s0f0np0']          # not cabled in this node: port down
    result = run_module(module_args)
    assert result['verdicts'][0]['registered'] is None
    assert 'could not run on rocep1s0f0 (rocep1s0f0: Port number 1 state is Down)' in result['problem']


def test_a_netdev_without_rdma_device_fails_naming_it(node):
    module_args = node(STOCK)
    module_args['netdevs'] = ['eth9']
    result = run_module(module_args)
    assert result['failed'] and 'no RDMA device found for the fabric netdev eth9' in result['msg']


def test_a_second_run_waits_for_the_first_runs_probe_then_passes(node):
    """The gate's bad-input runs (four site.yml at once) met on one port: 'Couldn't listen to port 18517' and
    'Couldn't connect to 127.0.0.1:18517'. A run now waits for the node's probe lock."""
    module_args = node(STOCK)
    fd = os.open(module_args['lock_file'], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)                  # another run's probe holds the node
    released = []

    def release():
        time.sleep(1.0)
        released.append(time.monotonic())
        os.close(fd)
    threading.Thread(target=release).start()
    result = run_module(module_args)
    assert released, "the module ran while another run held the lock"     # it returned only after the release
    assert result['problem'] == ''
    assert [v['registered'] for v in result['verdicts']] == [True, True]


def test_a_lock_held_beyond_lock_timeout_fails_naming_node_and_lock(node):
    module_args = dict(node(STOCK), lock_timeout=1)
    fd = os.open(module_args['lock_file'], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = run_module(module_args)
    finally:
        os.close(fd)
    assert result['failed']
    assert result['msg'].startswith('spark-worker: the RDMA memory-registration probe did not run: another probe '
                                    '(another ansible run on this node) held the lock %s for 1s' % module_args['lock_file'])
    assert 'verdicts' not in result


def test_the_lock_is_never_taken_below_a_directory_others_can_write(node, tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o1777)                            # like /tmp or /run/lock
    module_args = dict(node(STOCK), lock_file=str(shared / 'probe.lock'))
    result = run_module(module_args)
    assert result['failed'] and 'its directory %s is not a directory that only root' % shared in result['msg']
    assert list(shared.iterdir()) == []             # nothing created there


def test_a_link_planted_as_the_lock_is_not_followed(node, tmp_path):
    target = tmp_path / 'precious'
    target.write_text('keep\n')
    module_args = node(STOCK)
    Path(module_args['lock_file']).symlink_to(target)
    result = run_module(module_args)
    assert result['failed'] and 'cannot open the lock %s' % module_args['lock_file'] in result['msg']
    assert target.read_text() == 'keep\n'
