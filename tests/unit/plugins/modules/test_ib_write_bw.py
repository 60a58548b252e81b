# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/ib_write_bw.py.

The module runs the sim's ib_write_bw stand-in (sim/node/usr/bin/ib_write_bw) found through PATH, as it
would run perftest's on a node: loopback (server and client on 127.0.0.1) and client-only against a server
the test starts. Failures (no tool, unknown device, empty GID index, no server, timeout, output that does
not parse) use the stand-in or tiny fake tools.
"""

from __future__ import absolute_import, division, print_function

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.module_utils import perftest_probe
from ansible_collections.dgxspark.cluster.plugins.modules import ib_write_bw
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

REPO_ROOT = Path(__file__).resolve().parents[4]
TOOL = REPO_ROOT / 'sim' / 'node' / 'usr' / 'bin' / 'ib_write_bw'
NODE_LIB = REPO_ROOT / 'sim' / 'node' / 'usr' / 'lib' / 'spark-sim'
if str(NODE_LIB) not in sys.path:
    sys.path.insert(0, str(NODE_LIB))

from sparksim import rdma, state as statefile  # noqa: E402


def run_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            ib_write_bw.main()
    return excinfo.value.args[0]


def make_node(base, name, throttled=False, sysfs=None):
    """State JSON (+ sysfs unless shared: the bandwidth figures live in the JSON only)."""
    root = base / name
    root.mkdir()
    hcas = [rdma.default_hcas(name, [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.1'}])[1]]   # rocep1s0f1
    hcas[0]['ports'][0]['gid_tbl_len'] = 32          # 256 on a Spark; fewer files to write, indices 0..31 exist
    state = {'version': 1, 'hostname': name, 'hcas': hcas, 'sysfs_root': sysfs or str(root / 'sys'),
             'nic': {'throttled': throttled, 'throttle_persists': False}}
    statefile.save(state, str(root / 'state.json'))
    if sysfs is None:
        rdma.write_sysfs(state, str(root / 'sys'))
    return {'SPARK_SIM_STATE': str(root / 'state.json'), 'SPARK_SIM_SYSFS': state['sysfs_root']}


@pytest.fixture(scope='module')
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp('nodes')
    healthy = make_node(base, 'spark-head')
    return {'healthy': healthy, 'throttled': make_node(base, 'spark-worker', throttled=True,
                                                       sysfs=healthy['SPARK_SIM_SYSFS'])}


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture()
def sim(nodes, tmp_path, monkeypatch):
    """PATH holds only the stand-in; returns a function selecting the node the tool reads."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'ib_write_bw').symlink_to(TOOL)
    monkeypatch.setenv('PATH', str(bin_dir))
    monkeypatch.setenv('SPARK_SIM_IB_WRITE_BW_MAX_SLEEP', '0.05')

    def use(name):
        for key, value in nodes[name].items():
            monkeypatch.setenv(key, value)
        return nodes[name]
    use('healthy')
    return use


def fake_tool(tmp_path, monkeypatch, script):
    bin_dir = tmp_path / 'fakebin'
    bin_dir.mkdir()
    path = bin_dir / 'ib_write_bw'
    path.write_text('#!/bin/sh\n' + script)
    path.chmod(0o755)
    monkeypatch.setenv('PATH', str(bin_dir))
    return path


def args(**overrides):
    base = dict(device='rocep1s0f1', gid_index=3, address='127.0.0.1', duration=1, tcp_port=free_port(), timeout=20)
    base.update(overrides)
    return base


@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check'])
def test_loopback_healthy(sim, check_mode):
    module_args = args()
    if check_mode:
        module_args['_ansible_check_mode'] = True
    result = run_module(module_args)
    assert not result.get('failed'), result
    assert result['mode'] == 'loopback'
    assert result['changed'] is False
    assert 97.5 <= result['bw_gbps'] <= 98.5
    assert result['bw_peak_gbps'] == 0.0                      # -D: perftest does not measure the peak
    assert result['cmd'][1:] == ['-d', 'rocep1s0f1', '-i', '1', '-x', '3', '-p', str(module_args['tcp_port']),
                                 '-q', '4', '-D', '1', '-s', '65536', '-F', '--report_gbits', '127.0.0.1']
    assert result['qps'] == result['perftest']['qps'] == 4
    assert result['server_cmd'] == result['cmd'][:-1]
    assert 'Waiting for client to connect' in result['server_stdout']
    assert result['server_rc'] == 0
    assert result['perftest']['device'] == 'rocep1s0f1'
    assert result['perftest']['gid_index'] == 3
    assert result['perftest']['unit'] == 'Gb/sec'
    assert result['iterations'] > 0 and result['msg_rate_mpps'] > 0.18


def test_loopback_on_a_throttled_node_reads_healthy(sim):
    """Why the nic role measures node to node: a loopback never reaches the wire (the sim's worst case)."""
    sim('throttled')
    result = run_module(args())
    assert not result.get('failed'), result
    assert result['bw_gbps'] > 97


def test_client_only_against_a_peer_server(sim, nodes, tmp_path):
    """The peer (here a server started by the test, reading the throttled node) sets the pace: min of both ends."""
    port = free_port()
    environ = dict(os.environ, **nodes['throttled'])
    log = open(str(tmp_path / 'server.out'), 'w')
    server = subprocess.Popen([str(TOOL), '-d', 'rocep1s0f1', '-x', '3', '-p', str(port), '-q', '4', '-D', '1', '-F',
                               '--report_gbits'], env=environ, stdout=log, stderr=subprocess.STDOUT)
    try:
        result = run_module(args(tcp_port=port, loopback=False))
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
    assert not result.get('failed'), result
    assert result['mode'] == 'client'
    assert 'server_cmd' not in result
    assert 12.9 <= result['bw_gbps'] <= 13.3
    assert server.returncode == 0


def test_client_only_without_server(sim, monkeypatch):
    """No server on the peer: loopback with a closed port stands in for the peer (test traffic stays on this machine)."""
    monkeypatch.setattr(perftest_probe, 'CONNECT_GRACE', 0.3)
    module_args = args(loopback=False, address='127.0.0.1', tcp_port=free_port())
    monkeypatch.setattr(ib_write_bw, 'is_local_address', lambda address: False)
    started = time.monotonic()
    result = run_module(module_args)
    assert time.monotonic() - started < 10
    assert result['failed']
    for fragment in ('rocep1s0f1', '127.0.0.1', "Couldn't connect to 127.0.0.1:%d" % module_args['tcp_port'],
                     'is the server running on the peer', 'ib_write_bw -d rocep1s0f1'):
        assert fragment in result['msg'], (fragment, result['msg'])
    assert result['mode'] == 'client'


def test_address_decides_the_mode(monkeypatch):
    monkeypatch.setattr(perftest_probe, 'local_ipv4_addresses', lambda: {'192.168.100.1', '10.77.1.11'})
    assert perftest_probe.is_local_address('192.168.100.1') is True
    assert perftest_probe.is_local_address('192.168.100.2') is False
    assert perftest_probe.is_local_address('127.0.0.1') is True


def test_fib_trie_parsing():
    text = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 192.168.100.0/24 2 0 2
        |-- 192.168.100.0
           /24 link UNICAST
        |-- 192.168.100.1
           /32 host LOCAL
        |-- 192.168.100.255
           /32 link BROADCAST
Local:
  +-- 127.0.0.0/8 2 0 2
     |-- 127.0.0.1
        /32 host LOCAL
"""
    assert perftest_probe.parse_fib_trie(text) == {'192.168.100.1', '127.0.0.1'}


def test_tool_absent(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))
    with mock.patch.object(basic.AnsibleModule, 'get_bin_path', return_value=None):
        result = run_module(args())
    assert result['failed']
    for fragment in ('ib_write_bw is not installed', 'rocep1s0f1', '127.0.0.1', 'apt-get install perftest'):
        assert fragment in result['msg'], (fragment, result['msg'])


def test_unknown_device(sim):
    result = run_module(args(device='mlx5_9'))
    assert result['failed']
    for fragment in ('mlx5_9', '127.0.0.1', 'IB device mlx5_9 not found'):
        assert fragment in result['msg'], (fragment, result['msg'])


def test_empty_gid_index(sim):
    result = run_module(args(gid_index=9))
    assert result['failed']
    for fragment in ('GID index 9', 'exited 1', 'Failed to modify QP', 'to RTR'):
        assert fragment in result['msg'], (fragment, result['msg'])
    assert result.get('server_rc') == 1


def test_timeout_kills_both(tmp_path, monkeypatch):
    pids = tmp_path / 'pids'
    fake_tool(tmp_path, monkeypatch, 'echo $$ >> %s\nexec %s 30\n' % (pids, shutil.which('sleep')))
    monkeypatch.setattr(perftest_probe, 'BANNER_WAIT', 0.3)
    started = time.monotonic()
    result = run_module(args(timeout=1))
    assert time.monotonic() - started < 5
    assert result['failed']
    for fragment in ('did not finish within 1s', 'rocep1s0f1', '127.0.0.1', 'loopback'):
        assert fragment in result['msg'], (fragment, result['msg'])
    for pid in pids.read_text().split():
        with pytest.raises(OSError):
            os.kill(int(pid), 0)                              # killed and reaped


def test_output_that_does_not_parse(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, 'echo "Segmentation fault"\nexit 0\n')
    result = run_module(args(loopback=False, address='192.168.100.2'))
    assert result['failed']
    for fragment in ('does not parse', 'rocep1s0f1', '192.168.100.2', 'Segmentation fault'):
        assert fragment in result['msg'], (fragment, result['msg'])
    assert result['stdout'] == 'Segmentation fault\n'


def test_loopback_server_that_dies(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, 'echo "IB device rocep1s0f1 not found" >&2\nexit 1\n')
    result = run_module(args())
    assert result['failed']
    for fragment in ('server', 'exited 1 before a client connected', 'IB device rocep1s0f1 not found'):
        assert fragment in result['msg'], (fragment, result['msg'])


@pytest.mark.parametrize('overrides, fragment', [
    (dict(address='spark-02'), "'spark-02' is not an IPv4 address"),
    (dict(address='192.168.100.300'), 'is not an IPv4 address'),
    (dict(duration=0), 'duration must be positive'),
    (dict(gid_index=-1), 'gid_index must be 0 or more'),
    (dict(qps=0), 'qps must be positive'),
])
def test_bad_arguments(overrides, fragment):
    result = run_module(args(**overrides))
    assert result['failed']
    assert fragment in result['msg']


def test_tcp_listening_sees_a_listener_without_connecting():
    with socket.socket() as listener:
        listener.bind(('127.0.0.1', 0))
        port = listener.getsockname()[1]
        assert perftest_probe.tcp_listening(port) is False
        listener.listen(1)
        assert perftest_probe.tcp_listening(port) is True


def test_documentation_is_yaml():
    import yaml
    for block in (ib_write_bw.DOCUMENTATION, ib_write_bw.EXAMPLES, ib_write_bw.RETURN):
        assert yaml.safe_load(block)
    options = yaml.safe_load(ib_write_bw.DOCUMENTATION)['options']
    assert sorted(options) == ['address', 'device', 'duration', 'gid_index', 'ib_port', 'loopback', 'qps', 'size',
                               'tcp_port', 'timeout']


def test_the_defaults_are_nvidias_check():
    """NVIDIA's check runs ``ib_write_bw ... -F --report_gbits -q 4 -D 5``; the 80 Gb/s threshold is of that run.

    Fails on the old module, which measured with perftest's default of one queue pair for 2 s."""
    probe = perftest_probe.Probe('/usr/bin/ib_write_bw', 'rocep1s0f1', 3, '192.168.100.2')
    assert probe.cmd == ['/usr/bin/ib_write_bw', '-d', 'rocep1s0f1', '-i', '1', '-x', '3', '-p', '18515', '-q', '4',
                         '-D', '5', '-s', '65536', '-F', '--report_gbits', '192.168.100.2']
    import yaml
    options = yaml.safe_load(ib_write_bw.DOCUMENTATION)['options']
    assert (options['qps']['default'], options['duration']['default']) == (4, 5)


# The one-QP client report of NVIDIA's DGX Spark capture (dgx-spark-playbooks connect-two-sparks
# performance_benchmarking_guide.md, "Client-1 Output"; address lines left out)
ONE_QP_REPORT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : rocep1s0f1
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      882805           0.00               92.57                0.176554
---------------------------------------------------------------------------------------
"""


def test_a_report_with_other_queue_pairs_fails(tmp_path, monkeypatch):
    """A binary that ignores -q (or a server of another count) gives a figure of another run: refused."""
    fake_tool(tmp_path, monkeypatch, "%s <<'EOF'\n%sEOF\n" % (shutil.which('cat'), ONE_QP_REPORT))
    result = run_module(args(address='192.168.100.2', loopback=False))
    assert result['failed'] and 'reports 1 queue pairs, asked for 4' in result['msg'], result
