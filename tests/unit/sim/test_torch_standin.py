"""The torch stand-in (sim/vllm-standin/src/torch) under the collection's own entry point
(roles/runtime/files/dgxspark_collective.py), as doctor.yml runs it on a node: CUDA's initialisation against the
node's driver as the sim models it, and an NCCL all-reduce between two ranks (processes on 127.0.0.1) whose time is
the sim's fabric's (healthy, the power-delivery fault, a throttled NIC), NCCL's init failure on a wrong RoCE setup,
and a rendezvous that times out. Sources: sim/SOURCES.md, "torch stand-in"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from test_vllm_standin import free_port
from test_vllm_standin_nccl import WORKER_IP, spark_tree

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / 'sim' / 'vllm-standin' / 'src'
SCRIPT = REPO / 'roles' / 'runtime' / 'files' / 'dgxspark_collective.py'
sys.path.insert(0, str(SRC))

from torch import _sim  # noqa: E402  pylint: disable=wrong-import-position

DRIVER = '580.173.02'


def node(tmp_path: Path, name: str, gpu=None, nic=None, userspace=DRIVER):
    """Environment of one simulated node: its state file and userspace driver record."""
    folder = tmp_path / name
    folder.mkdir()
    state = {'gpu': dict({'name': 'NVIDIA GB10', 'driver_version': DRIVER}, **(gpu or {})), 'nic': nic or {}}
    (folder / 'state.json').write_text(json.dumps(state))
    env = dict(os.environ, SPARK_SIM_STATE=str(folder / 'state.json'),   # the netguard's PYTHONPATH and log kept
               PYTHONPATH=os.pathsep.join([str(SRC)] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]),
               SPARK_SIM_DRIVER_USERSPACE=str(folder / 'userspace'))
    for key in ('NCCL_IB_HCA', 'NCCL_IB_GID_INDEX', 'VLLM_HOST_IP', 'SPARK_SIM_SYSFS'):
        env.pop(key, None)
    if userspace:
        (folder / 'userspace').write_text(userspace + '\n')
    return env


def run(env, *args, timeout=60):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}, proc.stderr


def pair(envs, size_mb=1024, iters=3, warmup=1, timeout=30):
    """Both ranks at once; [(rc, result, stderr)] in rank order."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), 'allreduce', '--rank', str(rank), '--world-size', '2',
                               '--master-addr', '127.0.0.1', '--master-port', str(port), '--size-mb', str(size_mb),
                               '--iters', str(iters), '--warmup', str(warmup), '--timeout', str(timeout)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, env in enumerate(envs)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout + 60)
        out.append((proc.returncode, json.loads(stdout.strip().splitlines()[-1]), stderr))
    return out


# --------------------------------------------------------------------------- cuInit

def test_cuinit_on_a_healthy_node(tmp_path):
    rc, result, _stderr = run(node(tmp_path, 'n'), 'cuinit')
    assert rc == 0 and result == {'ok': True, 'devices': 1, 'name': 'NVIDIA GB10', 'torch': '0.0.0+spark.sim',
                                  'cuda': '13.0'}, result


@pytest.mark.parametrize('gpu, userspace, error', [
    ({'uvm_loaded': False}, DRIVER,
     'RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env '
     'variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.'),
    ({}, '590.48.01',
     'RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling '
     'NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / '
     'cuda driver combination'),
    ({'driver_loaded': False}, DRIVER, 'RuntimeError: No CUDA GPUs are available'),
])
def test_cuinit_fails_as_torch_words_it(tmp_path, gpu, userspace, error):
    rc, result, _stderr = run(node(tmp_path, 'n', gpu=gpu, userspace=userspace), 'cuinit')
    assert rc == 1 and result['ok'] is False and result['stage'] == 'cuda', result
    assert result['error'] == error


def test_no_userspace_record_is_no_mismatch(tmp_path):
    rc, result, _stderr = run(node(tmp_path, 'n', userspace=None), 'cuinit')
    assert rc == 0 and result['ok'], result


def test_is_available_warns_and_never_raises(tmp_path, monkeypatch):
    env = node(tmp_path, 'n', gpu={'uvm_loaded': False})
    monkeypatch.setenv('SPARK_SIM_STATE', env['SPARK_SIM_STATE'])
    monkeypatch.setenv('SPARK_SIM_DRIVER_USERSPACE', env['SPARK_SIM_DRIVER_USERSPACE'])
    import torch  # pylint: disable=import-outside-toplevel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert torch.cuda.is_available() is False
    assert [str(w.message) for w in caught] == ['CUDA initialization: CUDA unknown error - this may be due to an '
                                                'incorrectly set up environment, e.g. changing env variable '
                                                'CUDA_VISIBLE_DEVICES after program start. Setting the available '
                                                'devices to be zero.']


# --------------------------------------------------------------------------- the all-reduce

def test_a_healthy_pair_reads_back_the_healthy_busbw(tmp_path):
    results = pair([node(tmp_path, 'head'), node(tmp_path, 'worker')], size_mb=4096)
    for rank, (rc, result, stderr) in enumerate(results):
        assert rc == 0 and result['ok'], (result, stderr)
        assert (result['rank'], result['world_size'], result['bytes'], result['wrong']) == (rank, 2, 4 << 30, 0)
        # the sleep ends the op no earlier than the model's time: the figure never reads above the model's
        assert 20.0 < result['busbw_gbs'] <= round(_sim.HEALTHY_BUSBW, 2) + 0.01, result
        assert result['algbw_gbs'] == result['busbw_gbs']          # 2 * (2 - 1) / 2 = 1
        assert result['nccl'] == '2.27.7'


@pytest.mark.parametrize('nic, figure', [({'power_degraded': True}, _sim.POWER_DEGRADED_BUSBW),
                                         ({'throttled': True}, _sim.THROTTLED_BUSBW)])
def test_one_slow_node_slows_the_collective_on_both_ranks(tmp_path, nic, figure):
    results = pair([node(tmp_path, 'head'), node(tmp_path, 'worker', nic=nic)], size_mb=512, iters=2)
    for rc, result, stderr in results:
        assert rc == 0 and result['ok'], (result, stderr)
        assert figure * 0.8 < result['busbw_gbs'] <= round(figure, 2) + 0.01, result


def test_raw_rdma_healthy_power_fault_figures_are_unsloths():
    assert round(_sim.HEALTHY_BUSBW, 2) == 23.19 and round(_sim.POWER_DEGRADED_BUSBW, 2) == 3.22
    assert round(_sim.THROTTLED_BUSBW, 2) == 1.44


def test_a_wrong_roce_setup_fails_nccl_init_on_that_rank_and_its_peer(tmp_path):
    head = node(tmp_path, 'head')
    worker = node(tmp_path, 'worker')
    worker.update({'SPARK_SIM_SYSFS': str(spark_tree(tmp_path, 'tree', [WORKER_IP])), 'NCCL_IB_HCA': '=rocep1s0f1',
                   'NCCL_IB_GID_INDEX': '2', 'VLLM_HOST_IP': WORKER_IP})
    (rc0, r0, _stderr0), (rc1, r1, err1) = pair([head, worker], size_mb=1, iters=1)
    assert rc1 == 1 and r1['stage'] == 'init', r1
    assert r1['error'].startswith('DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, '
                                  'unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7 | '
                                  'ncclSystemError: System call (e.g. socket, malloc) or external library call failed '
                                  'or device error. | Last error: | NET/IB : ibv_modify_qp failed with 22'), r1
    assert 'NCCL WARN NET/IB : ibv_modify_qp failed with 22' in err1
    assert rc0 == 1 and r0['stage'] == 'init', r0
    assert 'remote process exited or there was a network error' in r0['error'] and 'rank 1 failed' in r0['error'], r0


def test_a_rank_alone_times_out_at_the_rendezvous(tmp_path):
    args = ('allreduce', '--rank', '1', '--world-size', '2', '--master-addr', '127.0.0.1', '--master-port',
            str(free_port()), '--timeout', '2')
    rc, result, _stderr = run(node(tmp_path, 'w'), *args)
    assert rc == 1 and result['stage'] == 'init', result
    assert result['error'].startswith('DistNetworkError: The client socket has timed out after 2000ms'), result


def test_cuda_failing_stops_the_allreduce_before_the_rendezvous(tmp_path):
    args = ('allreduce', '--rank', '0', '--world-size', '2', '--master-addr', '127.0.0.1', '--master-port',
            str(free_port()), '--timeout', '2')
    rc, result, _stderr = run(node(tmp_path, 'w', gpu={'uvm_loaded': False}), *args)
    assert rc == 1 and result['stage'] == 'cuda' and 'CUDA unknown error' in result['error'], result


def test_usage_errors_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), 'allreduce', '--rank', '2', '--world-size', '2',
                           '--master-addr', 'x', '--master-port', '1'], env=node(tmp_path, 'n'),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and 'expected 0 <= --rank < --world-size' in proc.stderr
