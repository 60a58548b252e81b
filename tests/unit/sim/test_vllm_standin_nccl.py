"""The vLLM stand-in enforces what NCCL checks at init over RoCE (sim/vllm-standin/src/vllm/nccl.py): the GID each
rank uses (NCCL_IB_GID_INDEX, or NCCL's own selection when it is unset or EMPTY: ncclLoadParam reads "" as unset and
IB_GID_INDEX defaults to -1, NCCL v2.27.7-1) must be a RoCE v2 GID on an ACTIVE port of every device of NCCL_IB_HCA,
one of them carrying VLLM_HOST_IP, read from the node's live sysfs tree (here: trees written by the sim's own sparksim.rdma.write_sysfs,
as spark-sim-boot writes them in a node). Otherwise the rank dies at rendezvous with seed 003's "unhandled system
error" and the head never serves. Every process runs on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict

import pytest

from captures import roce_port, write_tree
from test_vllm_standin import Proc, argv, free_port, request, wait_ready

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / 'sim' / 'vllm-standin' / 'src'))

from vllm import nccl  # noqa: E402

HEAD_IP, WORKER_IP, WORKER_IP2 = '192.168.110.1', '192.168.110.2', '192.168.111.2'


def spark_tree(tmp: Path, name: str, f1_ips, f1_up=True, twin_ips=(), twin_up=True, f0_ips=(), f0_up=False) -> Path:
    """A Spark's four RDMA devices; f1 (rocep1s0f1) carries ``f1_ips`` at GID pairs 2/3, 4/5..."""
    hcas = [
        {'name': 'rocep1s0f0', 'ca_type': 'MT4129', 'fw': '28.45.4028', 'hw_version': '0', 'node_guid': '0x0',
         'ports': [roce_port('enp1s0f0np0', '4c:bb:47:00:00:10', list(f0_ips), up=f0_up)]},
        {'name': 'rocep1s0f1', 'ca_type': 'MT4129', 'fw': '28.45.4028', 'hw_version': '0', 'node_guid': '0x0',
         'ports': [roce_port('enp1s0f1np1', '4c:bb:47:00:00:11', list(f1_ips), up=f1_up)]},
        {'name': 'roceP2p1s0f0', 'ca_type': 'MT4129', 'fw': '28.45.4028', 'hw_version': '0', 'node_guid': '0x0',
         'ports': [roce_port('enP2p1s0f0np0', '4c:bb:47:00:00:20', [], up=False)]},
        {'name': 'roceP2p1s0f1', 'ca_type': 'MT4129', 'fw': '28.45.4028', 'hw_version': '0', 'node_guid': '0x0',
         'ports': [roce_port('enP2p1s0f1np1', '4c:bb:47:00:00:21', list(twin_ips), up=twin_up)]},
    ]
    (tmp / name).mkdir()
    return write_tree(tmp / name, hcas)


def env(root: Path, ip: str, index: str = '3', hca: str = '=rocep1s0f1', **more: str) -> Dict[str, str]:
    values = {'SPARK_SIM_SYSFS': str(root), 'NCCL_IB_HCA': hca, 'VLLM_HOST_IP': ip}
    if index is not None:
        values['NCCL_IB_GID_INDEX'] = index
    values.update(more)
    return values


# --------------------------------------------------------------------------- the check

def test_the_resolved_index_passes(tmp_path):
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    assert nccl.init_problem(env(root, WORKER_IP)) is None


@pytest.mark.parametrize('index, fragment', [
    ('2', 'not a RoCE v2 IPv4 GID'),          # the v1 twin of the address
    ('1', 'not a RoCE v2 IPv4 GID'),          # the RoCE v2 link-local GID
    ('0', 'local GID index 0'),               # the link-local v1 GID
    ('5', 'not a RoCE v2 IPv4 GID'),          # an empty slot: the GIDs moved at a reboot
    ('999', 'ibv_query_gid failed'),          # beyond the table
    ('three', 'local GID index 0'),           # strtoll("three", NULL, 0) is 0 without an error
    (' ', 'local GID index 0'),               # not empty: strtoll of a blank is 0 too
])
def test_a_wrong_index_fails(tmp_path, index, fragment):
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    problem = nccl.init_problem(env(root, WORKER_IP, index))
    assert problem is not None and fragment in problem, problem


def test_an_index_carrying_another_address_fails(tmp_path):
    """After a reshuffle index 3 may be a valid RoCE v2 GID of another address of the netdev."""
    root = spark_tree(tmp_path, 'n', ['10.9.9.9', WORKER_IP])      # WORKER_IP at 5, 10.9.9.9 at 3
    problem = nccl.init_problem(env(root, WORKER_IP, '3'))
    assert problem and 'carry 10.9.9.9, not VLLM_HOST_IP %s' % WORKER_IP in problem
    assert nccl.init_problem(env(root, WORKER_IP, '5')) is None


def test_vllm_host_ip_on_the_bootstrap_interface_passes_and_elsewhere_fails(tmp_path):
    """A triangle of direct cables bootstraps on the LAN (the DSpark recipe's start-tp3.sh on real Sparks): VLLM_HOST_IP
    is the node's address on NCCL_SOCKET_IFNAME, no GID carries it, and the GIDs are still checked."""
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    lan = {'enP7s7': ['192.168.1.12'], 'enp1s0f1np1': [WORKER_IP]}
    seen = []

    def addresses(ifname):
        seen.append(ifname)
        return lan.get(ifname, [])

    assert nccl.init_problem(env(root, '192.168.1.12', NCCL_SOCKET_IFNAME='=enP7s7'), addresses=addresses) is None
    assert seen == ['enP7s7']
    # an address the node does not carry on that interface fails, naming both
    problem = nccl.init_problem(env(root, '192.168.1.99', NCCL_SOCKET_IFNAME='=enP7s7'), addresses=addresses)
    assert problem and 'not VLLM_HOST_IP 192.168.1.99' in problem and 'no address of NCCL_SOCKET_IFNAME =enP7s7' in problem
    # a prefix or exclude list names no interface exactly: worst case, it does not count
    assert nccl.init_problem(env(root, '192.168.1.12', NCCL_SOCKET_IFNAME='enP7'), addresses=addresses)
    assert nccl.init_problem(env(root, '192.168.1.12', NCCL_SOCKET_IFNAME='^docker'), addresses=addresses)
    # the LAN does not excuse a stale GID index
    assert 'Invalid argument' in nccl.init_problem(env(root, '192.168.1.12', '7', NCCL_SOCKET_IFNAME='=enP7s7'),
                                                   addresses=addresses)


def test_interface_ipv4_reads_the_loopback_of_this_machine():
    assert '127.0.0.1' in nccl.interface_ipv4('lo')
    assert nccl.interface_ipv4('no-such-if0') == []


def test_a_down_port_fails_even_with_its_gids(tmp_path):
    """A pulled cable keeps the GIDs while the address stays; NCCL uses ACTIVE ports only."""
    root = spark_tree(tmp_path, 'n', [], f0_ips=[WORKER_IP], f0_up=False)
    assert (root / 'class/infiniband/rocep1s0f0/ports/1/state').read_text() == '1: DOWN\n'
    assert nccl.gid_at(str(root / 'class/infiniband/rocep1s0f0/ports/1'), 3)[1] == 'RoCE v2'   # the GIDs stayed
    problem = nccl.init_problem(env(root, WORKER_IP, '3', hca='=rocep1s0f0'))
    assert problem and 'rocep1s0f0: no ACTIVE Ethernet port (port 1 DOWN)' in problem


def test_every_device_of_the_hca_list_is_checked(tmp_path):
    root = spark_tree(tmp_path, 'n', [WORKER_IP], twin_ips=[WORKER_IP2])
    assert nccl.init_problem(env(root, WORKER_IP, '3', hca='=rocep1s0f1,roceP2p1s0f1')) is None
    root2 = spark_tree(tmp_path, 'm', [WORKER_IP], twin_ips=['10.1.1.1', WORKER_IP2])   # the twin's address at 5
    problem = nccl.init_problem(env(root2, WORKER_IP, '3', hca='=rocep1s0f1,roceP2p1s0f1'))
    assert problem is None  # index 3 of the twin is 10.1.1.1: a RoCE v2 IPv4 GID, NCCL comes up (VLLM_HOST_IP is on f1)
    root3 = spark_tree(tmp_path, 'k', [WORKER_IP], twin_ips=[])
    problem = nccl.init_problem(env(root3, WORKER_IP, '3', hca='=rocep1s0f1,roceP2p1s0f1'))
    assert problem and 'roceP2p1s0f1 port 1' in problem


def test_device_matching_like_nccl(tmp_path):
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    devices = nccl.read_devices(str(root))
    assert nccl.select_devices('=rocep1s0f1', devices) == [('rocep1s0f1', None)]
    assert nccl.select_devices('rocep1s0f1:1', devices) == [('rocep1s0f1', 1)]
    assert [d for d, _p in nccl.select_devices('rocep1s0', devices)] == ['rocep1s0f0', 'rocep1s0f1']
    assert [d for d, _p in nccl.select_devices('^roceP2p1', devices)] == ['rocep1s0f0', 'rocep1s0f1']
    problem = nccl.init_problem(env(root, WORKER_IP, '3', hca='=mlx5_0'))
    assert problem and 'No device found for NCCL_IB_HCA==mlx5_0' in problem
    problem = nccl.init_problem(env(tmp_path / 'no-tree', WORKER_IP, '3'))
    assert problem and 'No device found' in problem   # worst case: no silent fallback to sockets


def test_auto_selection_when_the_index_is_unset(tmp_path):
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    assert nccl.init_problem(env(root, WORKER_IP, None, NCCL_IB_ADDR_FAMILY='AF_INET')) is None
    assert nccl.init_problem(env(root, WORKER_IP, '-1')) is None
    # nothing in range: the pick stays at index 0, the link-local GID
    problem = nccl.init_problem(env(root, WORKER_IP, None, NCCL_IB_ADDR_RANGE='10.0.0.0/8'))
    assert problem and 'local GID index 0 is fe80:' in problem and 'NCCL selected it' in problem, problem


@pytest.mark.parametrize('index', ['', None, '-1'])
def test_an_empty_index_is_unset_and_nccl_selects_the_gid(tmp_path, index):
    """ncclLoadParam: ``if (str && strlen(str) > 0) value = strtoll(...)``, else the default -1 of IB_GID_INDEX.

    Fails on the old stand-in, which read "" as index 0 (the link-local GID) and failed the rank."""
    root = spark_tree(tmp_path, 'n', [WORKER_IP])                     # WORKER_IP at 2 (v1) / 3 (v2)
    assert nccl.init_problem(env(root, WORKER_IP, index)) is None
    devices = nccl.read_devices(str(root))
    port_dir = str(devices['rocep1s0f1'][1]['dir'])
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, index)) == 3


def test_the_selection_takes_the_first_roce_v2_ipv4_gid_not_the_fabric_address(tmp_path):
    """Why the collection still writes an explicit index: NCCL's pick is the first RoCE v2 IPv4 GID of the port."""
    root = spark_tree(tmp_path, 'n', ['10.9.9.9', WORKER_IP])      # 10.9.9.9 at 2/3, WORKER_IP at 4/5
    problem = nccl.init_problem(env(root, WORKER_IP, ''))
    assert problem and 'carry 10.9.9.9, not VLLM_HOST_IP %s' % WORKER_IP in problem, problem
    assert 'NCCL_IB_GID_INDEX empty, so NCCL selected it' in problem
    port_dir = str(nccl.read_devices(str(root))['rocep1s0f1'][1]['dir'])
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '')) == 3
    # NCCL_IB_ADDR_RANGE steers the pick to the fabric address; the explicit index always works
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '', NCCL_IB_ADDR_RANGE='192.168.110.0/24')) == 5
    assert nccl.init_problem(env(root, WORKER_IP, '', NCCL_IB_ADDR_RANGE='192.168.110.0/24')) is None
    assert nccl.init_problem(env(root, WORKER_IP, '5')) is None


def test_the_selection_follows_ncclUpdateGidIndex(tmp_path):
    """Version and family rules of ncclUpdateGidIndex, and ncclLoadParam's strtoll for the version."""
    root = spark_tree(tmp_path, 'n', [WORKER_IP])
    port_dir = str(nccl.read_devices(str(root))['rocep1s0f1'][1]['dir'])
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '', NCCL_IB_ROCE_VERSION_NUM='1')) == 2
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '', NCCL_IB_ROCE_VERSION_NUM='')) == 3
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '', NCCL_IB_ADDR_FAMILY='inet')) == 3  # not AF_INET6
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '', NCCL_IB_ADDR_RANGE='192.168.110.2')) == 3  # no /
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '0x3')) == 3
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '3abc')) == 3
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '010')) == 8                      # octal
    assert nccl.select_gid_index(port_dir, env(root, WORKER_IP, '99999999999999999999')) == 3     # ERANGE: default
    assert [nccl.c_strtoll(t)[0] for t in ('three', ' ', '-2', '+7')] == [0, 0, -2, 7]


def test_nothing_checked_without_roce(tmp_path):
    assert nccl.init_problem({'SPARK_SIM_SYSFS': str(tmp_path)}) is None
    assert nccl.init_problem(env(tmp_path, WORKER_IP, '0', NCCL_IB_DISABLE='1')) is None
    assert nccl.init_problem(env(tmp_path, WORKER_IP, '0', NCCL_NET='Socket')) is None


# --------------------------------------------------------------------------- a pair at rendezvous

def start(tmp: Path, head_env: Dict[str, str], worker_env: Dict[str, str]):
    port, master = free_port(), free_port()
    worker = Proc(tmp, 'worker', argv('worker', port, master), worker_env)
    head = Proc(tmp, 'head', argv('head', port, master), head_env)
    return head, worker, port


def test_a_stale_worker_index_fails_the_worker_at_rendezvous_and_the_head_never_serves(tmp_path):
    head_tree = spark_tree(tmp_path, 'head', [HEAD_IP])
    worker_tree = spark_tree(tmp_path, 'worker', ['10.9.9.9', WORKER_IP])   # this boot put the address at index 5
    head, worker, port = start(tmp_path, env(head_tree, HEAD_IP), env(worker_tree, WORKER_IP, '3'))
    try:
        assert worker.wait(15) == 1
        log = worker.log()
        assert 'Joined the head' in log                              # it failed at rendezvous, not before
        assert 'NCCL WARN NET/IB : ibv_modify_qp failed with 22 Invalid argument' in log
        assert 'unhandled system error (run with NCCL_DEBUG=INFO for details)' in log
        assert head.wait(15) == 1
        assert 'Engine core initialization failed: lost node rank 1' in head.log()
        assert 'Application startup complete' not in head.log()
        with pytest.raises(OSError):
            request(port, '/health', key=None, timeout=1.0)
    finally:
        head.stop()
        worker.stop()
    # the resolver's index for this boot: both serve
    head, worker, port = start(tmp_path, env(head_tree, HEAD_IP), env(worker_tree, WORKER_IP, '5'))
    try:
        wait_ready(port, [head, worker], timeout=15)
        assert 'NCCL WARN' not in head.log() + worker.log()
    finally:
        head.stop()
        worker.stop()


def test_a_stale_head_index_fails_the_head(tmp_path):
    head_tree = spark_tree(tmp_path, 'head', [HEAD_IP])
    worker_tree = spark_tree(tmp_path, 'worker', [WORKER_IP])
    head, worker, _port = start(tmp_path, env(head_tree, HEAD_IP, '2'), env(worker_tree, WORKER_IP))
    try:
        assert head.wait(15) == 1
        assert 'unhandled system error' in head.log() and 'local GID index 2' in head.log()
        assert worker.wait(15) == 1
        assert 'Lost the head' in worker.log()
    finally:
        head.stop()
        worker.stop()
