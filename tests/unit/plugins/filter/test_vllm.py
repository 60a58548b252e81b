# -*- coding: utf-8 -*-
"""vllm_serve_argv / vllm_serve_warnings / vllm_serve_env / vllm_topology.

The seed 004 command for head and worker, one case per validation rule (each
asserting the message names the variable, what was found and what was
expected), the max_num_seqs warning, and that no secret reaches argv."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.vllm import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import roce_gids
from ansible_collections.dgxspark.cluster.plugins.module_utils.topology import cluster_topology
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_cmd import (
    CACHE_ENV_KEYS, KIND_ENV, KNOB_DEFAULTS, KNOBS, PER_HOST_ENV_KEYS, PROFILES, VllmConfigError, cudagraph_capture_size, serve_argv, serve_env,
    serve_warnings, speculative_config, topology)

REPO = Path(__file__).resolve().parents[4]
FILTERS = FilterModule().filters()
HEAD_IP = '192.168.100.1'
SECRET = 'sk-dgxspark-test-0123456789abcdef'

# Seed 004 "Runtime flags" + the MIA compose's serve line, with the 0731 defaults
# (.env.dspark switches): TP=2, mp, nnodes 2, nvfp4_ds_mla, block 256, 1M, 6 seqs,
# 8192 batched, 1024 long-prefill cap, capture 6 x (5 + 1) = 36, util 0.835, DSpark k=5.
SEED_HEAD = (
    "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb "
    "--served-model-name deepseek-v4-flash-0731 --host 0.0.0.0 --port 8888 --trust-remote-code "
    "--tensor-parallel-size 2 --distributed-executor-backend mp --nnodes 2 --node-rank 0 "
    "--master-addr 192.168.100.1 --master-port 25000 "
    "--kv-cache-dtype nvfp4_ds_mla --block-size 256 --max-model-len 1048576 --max-num-seqs 6 "
    "--max-num-batched-tokens 8192 --long-prefill-token-threshold 1024 --max-cudagraph-capture-size 36 "
    "--gpu-memory-utilization 0.835 --enable-prefix-caching --enable-chunked-prefill --async-scheduling "
    "--speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5,\"draft_sample_method\":\"probabilistic\"}' "
    "--tokenizer-mode deepseek_v4 --moe-backend flashinfer_b12x --tool-call-parser deepseek_v4 --enable-auto-tool-choice "
    "--reasoning-parser deepseek_v4 --default-chat-template-kwargs '{\"thinking\":true,\"reasoning_effort\":\"max\"}' "
    "--generation-config vllm --enable-flashinfer-autotune"
)
SEED_WORKER = SEED_HEAD.replace("--node-rank 0 ", "--node-rank 1 ").replace("--master-port 25000 ", "--master-port 25000 --headless ")

PAIR_GROUPS = {'spark_head': ['spark-head'], 'spark_workers': ['spark-worker']}
PAIR_CLUSTER_ARGS = (PAIR_GROUPS, {
    'spark-head': {'dgxspark_fabric_rails': [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.1'}]},
    'spark-worker': {'dgxspark_fabric_rails': [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.2'}]}})
PAIR_HOSTVARS = {
    'spark-head': {'dgxspark_fabric_rails': [{'netdev': 'enp1s0f1np1', 'ipv4': HEAD_IP}]},
    'spark-worker': {'dgxspark_fabric_rails': [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.2'}]},
}


def head(knobs=None, **kw):
    return serve_argv(knobs or {}, 'head', 0, 2, HEAD_IP, **kw)


def worker(knobs=None, **kw):
    return serve_argv(knobs or {}, 'worker', 1, 2, HEAD_IP, **kw)


def flag(argv, name):
    return argv[argv.index(name) + 1]


# ---------------------------------------------------------------------------- the seed's command

# The seed serves vLLM itself on 0.0.0.0:8888 (every route open): the collection's runtime_vllm_open_api_ok. By
# default the API proxy fronts it: vLLM on 127.0.0.1:8889, the rest of the command the seed's.
DIRECT = {'runtime_vllm_open_api_ok': True}


def proxied(seed):
    return shlex.split(seed.replace('--host 0.0.0.0 --port 8888', '--host 127.0.0.1 --port 8889'))


def test_head_reproduces_the_seed_command():
    assert head(DIRECT) == shlex.split(SEED_HEAD)
    assert head() == proxied(SEED_HEAD)


def test_worker_reproduces_the_seed_command():
    assert worker(DIRECT) == shlex.split(SEED_WORKER)
    assert worker() == proxied(SEED_WORKER)


@pytest.mark.parametrize('knobs,expected', [
    ({}, {'proxy': True, 'host': '0.0.0.0', 'port': 8888, 'vllm_host': '127.0.0.1', 'vllm_port': 8889}),
    ({'runtime_vllm_host': '10.0.0.5', 'runtime_vllm_backend_port': 9000},
     {'proxy': True, 'host': '10.0.0.5', 'port': 8888, 'vllm_host': '127.0.0.1', 'vllm_port': 9000}),
    ({'runtime_vllm_host': '127.0.0.1'}, {'proxy': False, 'host': '127.0.0.1', 'port': 8888, 'vllm_host': '127.0.0.1',
                                          'vllm_port': 8888}),
    ({'runtime_vllm_host': 'localhost'}, {'proxy': False, 'host': 'localhost', 'port': 8888, 'vllm_host': 'localhost',
                                          'vllm_port': 8888}),
    (DIRECT, {'proxy': False, 'host': '0.0.0.0', 'port': 8888, 'vllm_host': '0.0.0.0', 'vllm_port': 8888}),
], ids=['default-proxy', 'address-proxy', 'loopback', 'localhost', 'open-api-ok'])
def test_api_layout(knobs, expected):
    """Beyond loopback vLLM listens on loopback only and the proxy holds the API port (vLLM's key guards /v1 only)."""
    assert FILTERS['vllm_api_layout'](knobs) == expected
    argv = head(knobs)
    assert (flag(argv, '--host'), int(flag(argv, '--port'))) == (expected['vllm_host'], expected['vllm_port'])


def test_api_layout_never_holds_the_key():
    """Its result is addresses and ports only (tests/unit/test_role_secrets.py counts it as a sanitiser)."""
    key = 'sk-layout-test-0123456789'
    for knobs in ({'runtime_vllm_api_key': key}, {'runtime_vllm_api_key': key, 'runtime_vllm_host': '127.0.0.1'}):
        assert key not in repr(FILTERS['vllm_api_layout'](knobs))


def test_api_layout_refuses_one_port_for_both():
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS['vllm_api_layout']({'runtime_vllm_backend_port': 8888})
    assert 'runtime_vllm_backend_port is 8888, the same as runtime_vllm_port' in str(err.value)
    assert FILTERS['vllm_api_layout']({'runtime_vllm_backend_port': 8888, 'runtime_vllm_host': '127.0.0.1'})['vllm_port'] == 8888


# ---------------------------------------------------------------------------- the venv kind's own profile (seed 000)

def test_venv_profile_follows_seed_000_where_it_differs():
    """Seed 000's venv stack: Marlin MXFP4 MoE, FULL_AND_PIECEWISE graphs, max_num_seqs 12; not the image's b12x flags.
    The 0731 chat encoder as the recipe: --tokenizer-mode deepseek_v4 (DeepSeek ships no Jinja chat template)."""
    argv = head(runtime_kind='venv')
    assert flag(argv, '--max-num-seqs') == '12'
    assert flag(argv, '--max-cudagraph-capture-size') == str(12 * 6)
    assert flag(argv, '--moe-backend') == 'marlin'
    assert json.loads(flag(argv, '--compilation-config')) == {'cudagraph_mode': 'FULL_AND_PIECEWISE'}
    assert flag(argv, '--tokenizer-mode') == 'deepseek_v4'
    assert '--enable-flashinfer-autotune' not in argv
    # Where seed 000 says nothing different, both kinds agree (same builder, same flags).
    same = [a for a in head() if a not in ('--moe-backend', 'flashinfer_b12x', '--enable-flashinfer-autotune', '6', '36')]
    assert [a for a in argv if a in same] == same


def test_container_profile_is_the_recipe_command():
    assert head(runtime_kind='container') == head() == proxied(SEED_HEAD)
    assert '--compilation-config' not in head()


@pytest.mark.parametrize('name', sorted(PROFILES['venv']))
def test_null_takes_the_profile_and_a_value_wins(name):
    for kind in ('container', 'venv'):
        conf_null = serve_argv({'runtime_vllm_' + name: None}, 'head', 0, 2, HEAD_IP, runtime_kind=kind)
        assert conf_null == head(runtime_kind=kind)
    override = {'max_num_seqs': 8, 'tokenizer_mode': 'auto', 'moe_backend': 'triton', 'flashinfer_autotune': True,
                'cudagraph_mode': 'PIECEWISE'}[name]
    argv = head({'runtime_vllm_' + name: override}, runtime_kind='venv')
    assert argv != head(runtime_kind='venv')


def test_bad_kind_and_bad_cudagraph_mode():
    with pytest.raises(VllmConfigError) as err:
        head(runtime_kind='podman')
    assert "runtime_kind is 'podman' (str), expected one of container, venv" in str(err.value)
    with pytest.raises(VllmConfigError) as err:
        head({'runtime_vllm_cudagraph_mode': 'full'}, runtime_kind='venv')
    assert "runtime_vllm_cudagraph_mode is 'full', expected one of NONE" in str(err.value)
    with pytest.raises(VllmConfigError) as err:
        head({'runtime_vllm_extra_args': ['-O3']}, runtime_kind='venv')
    assert 'runtime_vllm_extra_args[0] is \'-O3\', expected no compilation config' in str(err.value)
    assert head({'runtime_vllm_extra_args': ['-O3']})[-1] == '-O3'


def test_arch_and_compile_knobs_per_kind():
    container, venv = serve_env({}), serve_env({}, 'venv')
    for key, value in [('TORCH_CUDA_ARCH_LIST', '12.1a'), ('FLASHINFER_CUDA_ARCH_LIST', '12.1a'), ('CUTE_DSL_ARCH', 'sm_121a'),
                       ('VLLM_USE_B12X_MOE', '1')]:
        assert container[key] == value
    assert venv['TORCH_CUDA_ARCH_LIST'] == '12.1a'
    assert 'VLLM_USE_B12X_MOE' not in venv and 'CUTE_DSL_ARCH' not in venv
    # vLLM #44992 removed VLLM_MXFP4_USE_MARLIN before 0.27 (the port's base): the venv's Marlin is --moe-backend marlin.
    assert 'VLLM_MXFP4_USE_MARLIN' not in container and 'VLLM_MXFP4_USE_MARLIN' not in venv
    # Each value carries the source of its value in a comment.
    src = (REPO / 'plugins' / 'module_utils' / 'vllm_cmd.py').read_text().splitlines()
    for kind, pairs in KIND_ENV.items():
        for key, _value in pairs:
            line = [ln for ln in src if ln.strip().startswith("('%s'," % key) and '#' in ln]
            assert line, (kind, key)


def test_head_and_worker_differ_only_in_rank_and_headless():
    h, w = head(), worker()
    assert '--headless' not in h and w.count('--headless') == 1
    assert [a for a in w if a != '--headless'] == [a if i != h.index('--node-rank') + 1 else '1' for i, a in enumerate(h)]


def test_the_speculative_config_is_seed_004s_json():
    spec = json.loads(flag(head(), '--speculative-config'))
    assert spec == {'method': 'dspark', 'num_speculative_tokens': 5, 'draft_sample_method': 'probabilistic'}
    assert list(spec) == ['method', 'num_speculative_tokens', 'draft_sample_method']
    assert speculative_config(7, 'greedy') == '{"method":"dspark","num_speculative_tokens":7,"draft_sample_method":"greedy"}'


@pytest.mark.parametrize('seqs,mtp,size', [(6, 5, 36), (4, 5, 24), (2, 3, 8), (16, 6, 112)])
def test_capture_size_is_seqs_times_mtp_plus_one(seqs, mtp, size):
    assert cudagraph_capture_size(seqs, mtp) == size
    argv = head({'runtime_vllm_max_num_seqs': seqs, 'runtime_vllm_mtp_num_tokens': mtp,
                 'runtime_vllm_model': 'deepseek-ai/DeepSeek-V4-Flash-DSpark', 'runtime_vllm_revision': ''})
    assert flag(argv, '--max-cudagraph-capture-size') == str(size)
    assert json.loads(flag(argv, '--speculative-config'))['num_speculative_tokens'] == mtp


def test_knobs_reach_their_flags():
    argv = head({'runtime_vllm_port': 9000, 'runtime_vllm_host': '127.0.0.1', 'runtime_vllm_master_port': 29500,
                 'runtime_vllm_gpu_memory_utilization': 0.87, 'runtime_vllm_kv_cache_dtype': 'fp8_ds_mla',
                 'runtime_vllm_max_model_len': 200000, 'runtime_vllm_max_num_batched_tokens': 16384,
                 'runtime_vllm_served_model_name': 'ds4', 'runtime_vllm_default_thinking': 'off',
                 'runtime_vllm_model': '/srv/models/DeepSeek-V4-Flash-0731', 'runtime_vllm_revision': ''})
    assert argv[2] == '/srv/models/DeepSeek-V4-Flash-0731' and '--revision' not in argv
    assert flag(argv, '--port') == '9000' and flag(argv, '--host') == '127.0.0.1' and flag(argv, '--master-port') == '29500'
    assert flag(argv, '--gpu-memory-utilization') == '0.87' and flag(argv, '--kv-cache-dtype') == 'fp8_ds_mla'
    assert flag(argv, '--max-model-len') == '200000' and flag(argv, '--max-num-batched-tokens') == '16384'
    assert flag(argv, '--served-model-name') == 'ds4'
    assert flag(argv, '--default-chat-template-kwargs') == '{"thinking":false}'


def test_switches_off():
    argv = head({'runtime_vllm_enable_chunked_prefill': False, 'runtime_vllm_max_num_batched_tokens': 1048576,
                 'runtime_vllm_async_scheduling': False, 'runtime_vllm_enable_prefix_caching': False,
                 'runtime_vllm_trust_remote_code': False, 'runtime_vllm_flashinfer_autotune': False,
                 'runtime_vllm_tokenizer_mode': '', 'runtime_vllm_moe_backend': '', 'runtime_vllm_tool_call_parser': '',
                 'runtime_vllm_reasoning_parser': '', 'runtime_vllm_default_thinking': '', 'runtime_vllm_generation_config': ''})
    assert '--no-enable-chunked-prefill' in argv and '--no-enable-prefix-caching' in argv
    for gone in ('--enable-chunked-prefill', '--async-scheduling', '--enable-prefix-caching', '--trust-remote-code',
                 '--enable-flashinfer-autotune', '--tokenizer-mode', '--moe-backend', '--tool-call-parser',
                 '--enable-auto-tool-choice', '--reasoning-parser', '--default-chat-template-kwargs', '--generation-config'):
        assert gone not in argv


def test_command_prefix_for_venv_and_container():
    assert head(command=['/opt/dgxspark/vllm/bin/vllm', 'serve'])[:3] == [
        '/opt/dgxspark/vllm/bin/vllm', 'serve', 'deepseek-ai/DeepSeek-V4-Flash-0731']
    container = worker(command=[])
    assert container == proxied(SEED_WORKER)[2:]


def test_extra_args_are_appended():
    argv = head({'runtime_vllm_extra_args': ['--enable-prompt-tokens-details', '--seed', '0']})
    assert argv[-3:] == ['--enable-prompt-tokens-details', '--seed', '0']


def test_unknown_keys_are_ignored():
    assert head({'runtime_vllm_venv_path': '/opt/x', 'unrelated': 1}) == proxied(SEED_HEAD)


def test_argv_is_plain_strings():
    assert {type(a) for a in head() + worker()} == {str}


# ---------------------------------------------------------------------------- topology

def pair_cluster():
    return cluster_topology(*PAIR_CLUSTER_ARGS)


def test_topology_of_the_pair():
    cluster = pair_cluster()
    assert topology(cluster, 'spark-head') == {
        'role': 'head', 'node_rank': 0, 'nnodes': 2, 'master_addr': HEAD_IP, 'head': 'spark-head',
        'hosts': ['spark-head', 'spark-worker']}
    topo = topology(cluster, 'spark-worker')
    assert (topo['role'], topo['node_rank'], topo['nnodes'], topo['master_addr']) == ('worker', 1, 2, HEAD_IP)
    assert serve_argv({}, topology=topo) == proxied(SEED_WORKER)
    assert serve_argv({}, topology=topology(cluster, 'spark-head')) == proxied(SEED_HEAD)


def test_workers_are_ranked_in_inventory_order_and_tp_follows():
    groups = {'spark_head': ['h'], 'spark_workers': ['w2', 'w1', 'w3']}
    hostvars = dict((h, {'dgxspark_fabric_rails': [{'netdev': 'enp1s0f1np1', 'ipv4': '192.168.100.%d' % (i + 1)}]})
                    for i, h in enumerate(('h', 'w1', 'w2', 'w3')))
    cluster = cluster_topology(groups, hostvars, shape='switch')
    ranks = {h: topology(cluster, h)['node_rank'] for h in ('h', 'w2', 'w1', 'w3')}
    assert ranks == {'h': 0, 'w2': 1, 'w1': 2, 'w3': 3}
    argv = serve_argv({}, topology=topology(cluster, 'w3'))
    assert flag(argv, '--tensor-parallel-size') == '4' and flag(argv, '--nnodes') == '4' and flag(argv, '--node-rank') == '3'
    assert flag(argv, '--master-addr') == '192.168.100.1'


def test_in_a_triangle_every_rank_meets_the_head_on_the_bootstrap_network():
    """Rail 0 of the head reaches one worker only: the rendezvous is the head's address on the LAN every node reaches
    (dgxspark_bootstrap; the DSpark recipe's start-tp3.sh TP3_BOOTSTRAP_IFNAME)."""
    groups = {'spark_head': ['a'], 'spark_workers': ['b', 'c']}
    hostvars = {'a': {'dgxspark_fabric_rails': [{'netdev': 'r0', 'ipv4': '192.168.100.1'}, {'netdev': 'r1', 'ipv4': '192.168.102.1'}]},
                'b': {'dgxspark_fabric_rails': [{'netdev': 'r0', 'ipv4': '192.168.100.2'}, {'netdev': 'r1', 'ipv4': '192.168.101.1'}]},
                'c': {'dgxspark_fabric_rails': [{'netdev': 'r0', 'ipv4': '192.168.102.2'}, {'netdev': 'r1', 'ipv4': '192.168.101.2'}]}}
    for i, host in enumerate('abc'):
        hostvars[host]['dgxspark_bootstrap'] = {'netdev': 'enP7s7', 'ipv4': '192.168.1.%d' % (11 + i)}
    cluster = cluster_topology(groups, hostvars)
    padded = {'runtime_vllm_attention_group_pad': True}  # TP=3 serves only with the attention-group pad
    assert flag(serve_argv(padded, topology=topology(cluster, 'b')), '--master-addr') == '192.168.1.11'
    assert flag(serve_argv(padded, topology=topology(cluster, 'c')), '--master-addr') == '192.168.1.11'


TOPOLOGY_CASES = [
    ('not-a-node', 'laptop', 'laptop: is not a node of preflight_topology (spark-head, spark-worker), expected a serving node'),
    ('no-topology', None, 'spark-worker: preflight_topology is None (NoneType), expected the topology the preflight play derives'),
    ('bad-master', 'bad', "spark-worker: preflight_topology.nodes[spark-worker].master_addr is 'spark-head' (str), expected"),
]


@pytest.mark.parametrize('case,message', [c[1:] for c in TOPOLOGY_CASES], ids=[c[0] for c in TOPOLOGY_CASES])
def test_topology_errors_name_the_host_and_variable(case, message):
    cluster = pair_cluster()
    host = 'spark-worker'
    if case == 'laptop':
        host = 'laptop'
    elif case is None:
        cluster = None
    else:
        cluster['nodes']['spark-worker']['master_addr'] = 'spark-head'
    with pytest.raises(VllmConfigError) as err:
        topology(cluster, host)
    assert message in str(err.value)


ARGV_TOPOLOGY_CASES = [
    ('bad-role', ('rank0', 0, 2, HEAD_IP), "role is 'rank0' (str), expected head or worker"),
    ('head-not-rank-0', ('head', 1, 2, HEAD_IP), 'node_rank is 1 for the head, expected 0'),
    ('worker-rank-0', ('worker', 0, 2, HEAD_IP), 'node_rank is 0 for a worker, expected 1..1'),
    ('worker-rank-too-high', ('worker', 2, 2, HEAD_IP), 'node_rank is 2 for a worker, expected 1..1'),
    ('rank-a-string', ('worker', '1', 2, HEAD_IP), "node_rank is '1' (str), expected an integer"),
    ('one-node', ('head', 0, 1, HEAD_IP), 'nnodes is 1, expected at least 2'),
    ('nnodes-a-string', ('head', 0, '2', HEAD_IP), "nnodes is '2' (str), expected an integer"),
    ('master-a-hostname', ('worker', 1, 2, 'spark-head'), "master_addr is 'spark-head' (str), expected the head's fabric IP address"),
    ('master-missing', ('worker', 1, 2, None), 'master_addr is None (NoneType), expected'),
]


@pytest.mark.parametrize('args,message', [c[1:] for c in ARGV_TOPOLOGY_CASES], ids=[c[0] for c in ARGV_TOPOLOGY_CASES])
def test_bad_topology_arguments(args, message):
    with pytest.raises(VllmConfigError) as err:
        serve_argv({}, *args)
    assert message in str(err.value)


def test_tensor_parallel_size_must_equal_the_node_count():
    assert flag(head({'runtime_vllm_tensor_parallel_size': 2}), '--tensor-parallel-size') == '2'
    with pytest.raises(VllmConfigError) as err:
        head({'runtime_vllm_tensor_parallel_size': 4})
    assert 'runtime_vllm_tensor_parallel_size is 4, expected 2: the number of nodes in the inventory' in str(err.value)


# ---------------------------------------------------------------------------- validation rows

BAD_KNOBS = [
    # MTP >= 5 for the 0731 checkpoint
    ('mtp-4-on-0731', {'runtime_vllm_mtp_num_tokens': 4},
     'runtime_vllm_mtp_num_tokens is 4, expected at least 5 for the 0731 checkpoint deepseek-ai/DeepSeek-V4-Flash-0731'),
    ('mtp-3-on-0731-local-dir', {'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': '/models/DeepSeek-V4-Flash-0731'},
     'runtime_vllm_mtp_num_tokens is 3, expected at least 5 for the 0731 checkpoint'),
    ('mtp-0-other-model', {'runtime_vllm_mtp_num_tokens': 0, 'runtime_vllm_model': 'deepseek-ai/DeepSeek-V4-Flash-DSpark',
                           'runtime_vllm_revision': ''},
     'runtime_vllm_mtp_num_tokens is 0, expected at least 1'),
    ('mtp-a-string', {'runtime_vllm_mtp_num_tokens': '5'}, "runtime_vllm_mtp_num_tokens is '5' (str), expected an integer"),
    # utilization in (0, 0.87]
    ('util-0', {'runtime_vllm_gpu_memory_utilization': 0}, 'runtime_vllm_gpu_memory_utilization is 0.0, expected more than 0 and at most 0.87'),
    ('util-negative', {'runtime_vllm_gpu_memory_utilization': -0.5}, 'runtime_vllm_gpu_memory_utilization is -0.5, expected more than 0'),
    ('util-0.88', {'runtime_vllm_gpu_memory_utilization': 0.88}, 'runtime_vllm_gpu_memory_utilization is 0.88, expected more than 0 and at most 0.87'),
    ('util-1', {'runtime_vllm_gpu_memory_utilization': 1}, 'runtime_vllm_gpu_memory_utilization is 1.0, expected more than 0 and at most 0.87'),
    ('util-a-string', {'runtime_vllm_gpu_memory_utilization': '0.835'},
     "runtime_vllm_gpu_memory_utilization is '0.835' (str), expected a number"),
    ('util-a-bool', {'runtime_vllm_gpu_memory_utilization': True}, 'runtime_vllm_gpu_memory_utilization is True (bool), expected a number'),
    # max_model_len <= 1,048,576
    ('len-over-1m', {'runtime_vllm_max_model_len': 1048577}, 'runtime_vllm_max_model_len is 1048577, expected between 1 and 1048576'),
    ('len-0', {'runtime_vllm_max_model_len': 0}, 'runtime_vllm_max_model_len is 0, expected between 1 and 1048576'),
    ('len-a-string', {'runtime_vllm_max_model_len': '1M'}, "runtime_vllm_max_model_len is '1M' (str), expected an integer"),
    # kv dtype
    ('kv-fp8', {'runtime_vllm_kv_cache_dtype': 'fp8'}, "runtime_vllm_kv_cache_dtype is 'fp8', expected one of fp8_ds_mla, nvfp4_ds_mla"),
    ('kv-auto', {'runtime_vllm_kv_cache_dtype': 'auto'}, "runtime_vllm_kv_cache_dtype is 'auto', expected one of fp8_ds_mla, nvfp4_ds_mla"),
    ('kv-not-a-string', {'runtime_vllm_kv_cache_dtype': None}, 'runtime_vllm_kv_cache_dtype is None (NoneType), expected a string'),
    # other ranges and choices
    ('port-0', {'runtime_vllm_port': 0}, 'runtime_vllm_port is 0, expected between 1 and 65535'),
    ('master-port-70000', {'runtime_vllm_master_port': 70000}, 'runtime_vllm_master_port is 70000, expected between 1 and 65535'),
    ('seqs-0', {'runtime_vllm_max_num_seqs': 0}, 'runtime_vllm_max_num_seqs is 0, expected at least 1'),
    ('batched-below-seqs', {'runtime_vllm_max_num_batched_tokens': 4},
     'runtime_vllm_max_num_batched_tokens is 4, expected at least runtime_vllm_max_num_seqs (6)'),
    ('no-chunked-prefill-small-batch', {'runtime_vllm_enable_chunked_prefill': False},
     'runtime_vllm_max_num_batched_tokens is 8192, expected at least runtime_vllm_max_model_len (1048576) when '
     'runtime_vllm_enable_chunked_prefill is false'),
    ('long-prefill-negative', {'runtime_vllm_long_prefill_token_threshold': -1},
     'runtime_vllm_long_prefill_token_threshold is -1, expected at least 0'),
    ('block-0', {'runtime_vllm_block_size': 0}, 'runtime_vllm_block_size is 0, expected at least 1'),
    # seed 000 #1/#2: the main KV store stays at 256
    ('block-64', {'runtime_vllm_block_size': 64}, 'runtime_vllm_block_size is 64, expected 256: the DeepSeek-V4 main KV store'),
    ('block-128', {'runtime_vllm_block_size': 128}, 'set runtime_vllm_block_size_override: true'),
    # the 0731 checkpoint by repo id and revision, not by a substring of a path
    ('mtp-3-on-the-pinned-commit', {'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': 'mirror/renamed-checkpoint'},
     'runtime_vllm_mtp_num_tokens is 3, expected at least 5 for the 0731 checkpoint'),
    ('mtp-3-on-the-repo-id-any-case', {'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': 'DeepSeek-AI/deepseek-v4-flash-0731',
                                       'runtime_vllm_revision': ''},
     'runtime_vllm_mtp_num_tokens is 3, expected at least 5 for the 0731 checkpoint'),
    ('mtp-3-local-dir-without-0731-in-its-name', {'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': '/srv/models/flash',
                                                  'runtime_vllm_revision': ''},
     'runtime_vllm_mtp_num_tokens is 3, expected at least 5 for the 0731 checkpoint'),
    ('draft-method', {'runtime_vllm_draft_sample_method': 'typical'},
     "runtime_vllm_draft_sample_method is 'typical', expected one of probabilistic, greedy"),
    ('thinking', {'runtime_vllm_default_thinking': 'medium'},
     "runtime_vllm_default_thinking is 'medium', expected one of off, low, high, max"),
    ('model-empty', {'runtime_vllm_model': ' '}, 'runtime_vllm_model is empty, expected a non-empty string'),
    ('served-name-empty', {'runtime_vllm_served_model_name': ''}, 'runtime_vllm_served_model_name is empty'),
    ('revision-with-space', {'runtime_vllm_revision': 'main branch'}, "runtime_vllm_revision is 'main branch', expected a commit sha"),
    ('tp-a-string', {'runtime_vllm_tensor_parallel_size': '2'}, "runtime_vllm_tensor_parallel_size is '2' (str), expected an integer"),
    # extra args
    ('extra-args-a-string', {'runtime_vllm_extra_args': '--seed 0'}, "runtime_vllm_extra_args is '--seed 0' (str), expected a list of strings"),
    ('extra-args-an-int', {'runtime_vllm_extra_args': ['--seed', 0]}, 'runtime_vllm_extra_args[1] is 0 (int), expected a string'),
    ('extra-args-api-key', {'runtime_vllm_extra_args': ['--api-key', 'x']},
     'runtime_vllm_extra_args[0] is --api-key, expected no API key in argv'),
    ('extra-args-api-key-equals', {'runtime_vllm_extra_args': ['--api-key=x']},
     'runtime_vllm_extra_args[0] is --api-key, expected no API key in argv'),
    ('extra-args-owned-flag', {'runtime_vllm_extra_args': ['--max-num-seqs', '2']},
     "runtime_vllm_extra_args[0] is '--max-num-seqs', expected a flag no knob sets"),
    # environment
    ('env-not-a-dict', {'runtime_vllm_env': ['A=1']}, "runtime_vllm_env is ['A=1'] (list), expected a dict"),
    ('env-api-key', {'runtime_vllm_env': {'VLLM_API_KEY': 'x'}}, "runtime_vllm_env.VLLM_API_KEY is set, expected secrets only in the service's"),
    ('env-gid-index', {'runtime_vllm_env': {'NCCL_IB_GID_INDEX': '3'}},
     'runtime_vllm_env.NCCL_IB_GID_INDEX is set, expected the per-host fabric values only from the nic resolver'),
    ('env-hca', {'runtime_vllm_env': {'NCCL_IB_HCA': '=rocep1s0f1'}}, 'runtime_vllm_env.NCCL_IB_HCA is set, expected the per-host'),
    ('env-bad-name', {'runtime_vllm_env': {'BAD-NAME': '1'}}, "runtime_vllm_env has the key 'BAD-NAME', expected environment variable names"),
    ('env-nested', {'runtime_vllm_env': {'A': {'b': 1}}}, "runtime_vllm_env.A is {'b': 1} (dict), expected a string or a number"),
    ('env-newline', {'runtime_vllm_env': {'A': 'x\ny'}}, 'runtime_vllm_env.A contains a line break or NUL'),
    ('knobs-not-a-dict', ['runtime_vllm_model'], "the vLLM knobs are ['runtime_vllm_model'] (list), expected a dict"),
]


@pytest.mark.parametrize('knobs,message', [c[1:] for c in BAD_KNOBS], ids=[c[0] for c in BAD_KNOBS])
def test_bad_knob_is_named(knobs, message):
    for func in (lambda k: head(k) if isinstance(k, dict) else serve_argv(k, 'head', 0, 2, HEAD_IP), serve_warnings, serve_env):
        with pytest.raises(VllmConfigError) as err:
            func(knobs)
        assert message in str(err.value), (message, str(err.value))


BOOL_KNOBS = [name for name, _d, kind, _doc in KNOBS if kind == 'bool']
INT_KNOBS = [name for name, _d, kind, _doc in KNOBS if kind == 'int']


# null is the kind profile's value for a profile knob (test_null_takes_the_profile_and_a_value_wins)
@pytest.mark.parametrize('name,value', [(n, v) for n in BOOL_KNOBS for v in ['true', 'yes', 1, 0, None]
                                        if not (v is None and n in PROFILES['container'])])
def test_booleans_must_be_booleans(name, value):
    with pytest.raises(VllmConfigError) as err:
        head({'runtime_vllm_' + name: value})
    assert 'runtime_vllm_%s is %r (%s), expected a boolean (true or false)' % (name, value, type(value).__name__) in str(err.value)


@pytest.mark.parametrize('name', [n for n in INT_KNOBS if n != 'tensor_parallel_size'])
@pytest.mark.parametrize('value', ['6', 6.0, True])
def test_integers_must_be_integers(name, value):
    with pytest.raises(VllmConfigError) as err:
        head({'runtime_vllm_' + name: value})
    assert 'runtime_vllm_%s is %r (%s), expected an integer' % (name, value, type(value).__name__) in str(err.value)


@pytest.mark.parametrize('knobs', [
    {'runtime_vllm_gpu_memory_utilization': 0.87},
    {'runtime_vllm_gpu_memory_utilization': 0.8},
    {'runtime_vllm_max_model_len': 1048576},
    {'runtime_vllm_kv_cache_dtype': 'fp8_ds_mla'},
    {'runtime_vllm_mtp_num_tokens': 7},
    {'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': 'deepseek-ai/DeepSeek-V4-Flash-DSpark', 'runtime_vllm_revision': ''},
    {'runtime_vllm_tensor_parallel_size': None},
    {'runtime_vllm_env': {'NCCL_DEBUG': 'INFO', 'VLLM_ENABLE_RESPONSES_API_STORE': True, 'OMP_NUM_THREADS': 4}},
], ids=['util-0.87', 'util-0.8', 'len-1m', 'kv-fp8', 'mtp-7', 'mtp-3-preview', 'tp-null', 'env'])
def test_good_edges_pass(knobs):
    assert head(knobs)


# ---------------------------------------------------------------------------- warnings

def test_defaults_warn_nothing():
    assert serve_warnings({}) == []


@pytest.mark.parametrize('seqs', [1, 2, 5])
def test_fewer_than_six_seqs_warns_about_the_captured_graphs(seqs):
    warnings = serve_warnings({'runtime_vllm_max_num_seqs': seqs})
    assert len(warnings) == 1
    assert warnings[0].startswith('runtime_vllm_max_num_seqs is %d (below 6): --max-cudagraph-capture-size follows it (%d instead of 36)'
                                  % (seqs, seqs * 6))
    assert 'a third' in warnings[0]
    head({'runtime_vllm_max_num_seqs': seqs})  # a warning, not an error


def test_six_or_more_seqs_do_not_warn():
    assert serve_warnings({'runtime_vllm_max_num_seqs': 6}) == serve_warnings({'runtime_vllm_max_num_seqs': 16}) == []


@pytest.mark.parametrize('knobs,fragment', [
    ({'runtime_vllm_long_prefill_token_threshold': 0}, 'runtime_vllm_long_prefill_token_threshold is 0: one long prefill'),
    ({'runtime_vllm_revision': 'main'}, "runtime_vllm_revision is 'main', not a commit sha"),
    ({'runtime_vllm_revision': ''}, 'runtime_vllm_revision is empty'),
    ({'runtime_vllm_hf_hub_offline': False}, 'runtime_vllm_hf_hub_offline is false'),
])
def test_other_warnings(knobs, fragment):
    assert any(fragment in w for w in serve_warnings(knobs))


# ---------------------------------------------------------------------------- secrets

@pytest.mark.parametrize('role', ['head', 'worker'])
def test_no_secret_in_argv(role):
    knobs = dict(KNOB_DEFAULTS, runtime_vllm_api_key=SECRET)
    argv = head(knobs) if role == 'head' else worker(knobs)
    joined = ' '.join(argv)
    assert SECRET not in joined and '--api-key' not in joined and 'VLLM_API_KEY' not in joined
    env = serve_env(knobs)
    assert SECRET not in json.dumps(env) and 'VLLM_API_KEY' not in env


def test_a_secret_smuggled_into_argv_is_refused():
    for knobs in ({'runtime_vllm_api_key': SECRET, 'runtime_vllm_extra_args': ['--seed', SECRET]},
                  {'runtime_vllm_api_key': SECRET, 'runtime_vllm_extra_args': ['--middleware=x%sy' % SECRET]},
                  {'runtime_vllm_api_key': SECRET, 'runtime_vllm_served_model_name': SECRET}):
        with pytest.raises(VllmConfigError) as err:
            head(knobs)
        assert 'runtime_vllm_api_key appears in the vllm serve argv' in str(err.value)
        assert SECRET not in str(err.value)


# ---------------------------------------------------------------------------- environment

def test_static_environment():
    env = serve_env({})
    for key, _value in KIND_ENV['container']:
        env.pop(key)
    assert env == {
        'NCCL_DEBUG': 'WARN',
        'VLLM_USE_BREAKABLE_CUDAGRAPH': '0', 'VLLM_PREFIX_CACHE_RETENTION_INTERVAL': '4096',
        'VLLM_ALLOW_LONG_MAX_MODEL_LEN': '1', 'HF_HUB_DISABLE_XET': '1',
        'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True', 'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1'}
    assert not set(env) & set(PER_HOST_ENV_KEYS)
    assert {type(v) for v in env.values()} == {str}


def test_environment_knobs_merge_last():
    env = serve_env({'runtime_vllm_hf_hub_offline': False,
                     'runtime_vllm_env': {'NCCL_DEBUG': 'INFO', 'VLLM_ENABLE_RESPONSES_API_STORE': True, 'OMP_NUM_THREADS': 4}})
    assert (env['HF_HUB_OFFLINE'], env['TRANSFORMERS_OFFLINE'], env['NCCL_DEBUG']) == ('0', '0', 'INFO')
    assert (env['VLLM_ENABLE_RESPONSES_API_STORE'], env['OMP_NUM_THREADS']) == ('1', '4')


def test_the_static_fabric_knobs_have_one_owner():
    # The nic role's nic_nccl_static_env reaches the ranks through the resolver's file, which the unit and the
    # compose project read after vllm.env: a copy here would be dead (and a key removed there would stay here).
    defaults = yaml.safe_load((REPO / 'roles' / 'nic' / 'defaults' / 'main.yml').read_text())
    nic_keys = set(defaults['nic_nccl_static_env'])
    assert {'NCCL_NET', 'NCCL_IB_DISABLE', 'NCCL_CROSS_NIC'} <= nic_keys
    for kind in ('container', 'venv'):
        assert not set(serve_env({}, kind)) & nic_keys


def test_per_host_keys_match_the_nic_resolver():
    assert set(PER_HOST_ENV_KEYS) == set(roce_gids.NCCL_ENV_KEYS) | set(roce_gids.NCCL_AUTO_KEYS)


# ---------------------------------------------------------------------------- the filters

def test_filters_are_registered():
    assert set(FILTERS) == {'vllm_serve_argv', 'vllm_serve_warnings', 'vllm_serve_env', 'vllm_topology', 'vllm_api_problems', 'vllm_api_layout',
                            'vllm_layout_problems'}


@pytest.mark.parametrize('nodes, knobs, expected', [
    (2, {}, []), (4, {}, []), (8, {}, []),
    (3, {'runtime_vllm_attention_group_pad': True}, []),
    (3, {}, ['tensor parallel 3 (3 nodes) does not divide the 8 attention groups of deepseek-ai/DeepSeek-V4-Flash-0731: stock vLLM would '
             'compute 8 // 3 = 2 groups per rank and serve wrong answers without an error. Expected 2, 4 or 8 nodes; or, on 3 nodes, a '
             "runtime that carries the attention-group pad (groups 8 -> 9, the DSpark recipe's start-tp3.sh) and "
             'runtime_vllm_attention_group_pad: true']),
    (6, {'runtime_vllm_attention_group_pad': True}, ['tensor parallel 6 (6 nodes) does not divide the 8 attention groups of '
                                                     'deepseek-ai/DeepSeek-V4-Flash-0731: stock vLLM would compute 8 // 6 = 1 groups '
                                                     'per rank and serve wrong answers without an error. Expected 2, 4 or 8 nodes '
                                                     '(no public recipe serves this model on 6 nodes)']),
    (3, {'runtime_vllm_model': 'org/other-model'}, []),
    (3, {'runtime_vllm_model': '/srv/models/local'}, None),
    (4, {'runtime_vllm_tensor_parallel_size': 2}, ['runtime_vllm_tensor_parallel_size is 2, expected 4: the number of nodes in the '
                                                   'inventory (spark_head + spark_workers), one GB10 GPU each']),
])
def test_the_parallel_layout_fits_the_model_or_names_why(nodes, knobs, expected):
    problems = FILTERS['vllm_layout_problems'](knobs, nodes)
    if expected is None:  # a local directory is checked as the worst case: this model
        assert problems and problems[0].startswith('tensor parallel 3 (3 nodes)')
    else:
        assert problems == expected
    if problems:
        with pytest.raises(AnsibleFilterError):
            FILTERS['vllm_serve_argv'](knobs, role='head', node_rank=0, nnodes=nodes, master_addr=HEAD_IP)


def test_filters_raise_ansible_filter_errors():
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS['vllm_serve_argv']({'runtime_vllm_max_num_seqs': '6'}, role='head', node_rank=0, nnodes=2, master_addr=HEAD_IP)
    assert "vllm_serve_argv: runtime_vllm_max_num_seqs is '6' (str), expected an integer" in str(err.value)
    with pytest.raises(AnsibleFilterError):
        FILTERS['vllm_serve_warnings']({'runtime_vllm_gpu_memory_utilization': 0.9})
    with pytest.raises(AnsibleFilterError):
        FILTERS['vllm_serve_env']({'runtime_vllm_env': {'VLLM_API_KEY': 'x'}})
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS['vllm_topology'](pair_cluster(), 'nowhere')
    assert 'nowhere: is not a node of preflight_topology' in str(err.value)


def test_filters_return_what_module_utils_returns():
    topo = FILTERS['vllm_topology'](pair_cluster(), 'spark-worker')
    assert FILTERS['vllm_serve_argv']({}, topology=topo) == proxied(SEED_WORKER)
    assert FILTERS['vllm_serve_warnings']({'runtime_vllm_max_num_seqs': 2}) == serve_warnings({'runtime_vllm_max_num_seqs': 2})
    assert FILTERS['vllm_serve_env']({}) == serve_env({})


def test_the_documented_knobs_are_the_knobs():
    doc = yaml.safe_load((REPO / 'plugins' / 'filter' / 'vllm_serve_argv.yml').read_text())['DOCUMENTATION']
    sub = doc['options']['_input']['suboptions']
    assert set(sub) == set(KNOB_DEFAULTS)
    for name, default in KNOB_DEFAULTS.items():
        if default is None:
            assert 'default' not in sub[name], name
        else:
            assert sub[name]['default'] == default, name
    for name in ('vllm_serve_warnings', 'vllm_serve_env', 'vllm_topology'):
        assert yaml.safe_load((REPO / 'plugins' / 'filter' / (name + '.yml')).read_text())['DOCUMENTATION']['name'] == name


@pytest.mark.integration
def test_through_ansible_templating(tmp_path):
    """The filters through ansible-core's templating (lazy containers, tagged values, **kwargs-free call)."""
    playbook = tmp_path / 'play.yml'
    playbook.write_text(textwrap.dedent("""\
        - hosts: spark
          gather_facts: false
          vars:
            runtime_vllm_max_num_seqs: 6
            runtime_vllm_api_key: %s
            __names: "{{ query('ansible.builtin.varnames', '^runtime_vllm_') }}"
            __knobs: "{{ dict(__names | zip(query('ansible.builtin.vars', *__names))) }}"
            __cluster: "{{ groups | dgxspark.cluster.cluster_topology(hostvars) }}"
            __topo: "{{ __cluster | dgxspark.cluster.vllm_topology(inventory_hostname) }}"
          tasks:
            - ansible.builtin.copy:
                dest: "{{ out }}/{{ inventory_hostname }}.json"
                content: "{{ {'argv': __knobs | dgxspark.cluster.vllm_serve_argv(topology=__topo),
                              'warnings': __knobs | dgxspark.cluster.vllm_serve_warnings,
                              'env': __knobs | dgxspark.cluster.vllm_serve_env} | to_json }}"
                mode: "0600"
              delegate_to: localhost
        """ % SECRET))
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(yaml.safe_dump({'all': {'children': {'spark': {'children': {
        'spark_head': {'hosts': {'spark-head': PAIR_HOSTVARS['spark-head']}},
        'spark_workers': {'hosts': {'spark-worker': PAIR_HOSTVARS['spark-worker']}}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_COLLECTIONS_PATH=str(REPO / 'collections'))
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / 'ansible-playbook'), '-i', str(inventory), str(playbook), '-e', 'out=%s' % tmp_path,
                           '-c', 'local'], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head_out = json.loads((tmp_path / 'spark-head.json').read_text())
    worker_out = json.loads((tmp_path / 'spark-worker.json').read_text())
    assert head_out['argv'] == proxied(SEED_HEAD) and worker_out['argv'] == proxied(SEED_WORKER)
    assert head_out['warnings'] == [] and head_out['env'] == serve_env({})
    assert SECRET not in (tmp_path / 'spark-head.json').read_text()


def test_another_block_size_only_with_the_override():
    argv = head({'runtime_vllm_block_size': 64, 'runtime_vllm_block_size_override': True})
    assert flag(argv, '--block-size') == '64'


def test_an_other_repo_with_0731_in_its_name_is_not_the_0731_checkpoint():
    argv = head({'runtime_vllm_mtp_num_tokens': 3, 'runtime_vllm_model': 'someone/Qwen-0731-tiny', 'runtime_vllm_revision': ''})
    assert json.loads(flag(argv, '--speculative-config'))['num_speculative_tokens'] == 3


@pytest.mark.parametrize('knobs', [
    {'runtime_vllm_host': '127.0.0.1'}, {'runtime_vllm_host': '127.0.0.2'}, {'runtime_vllm_host': '::1'},
    {'runtime_vllm_host': 'localhost'}, {'runtime_vllm_api_key': 'sk-0123456789abcdef'},
    {'runtime_vllm_host': '192.168.100.1', 'runtime_vllm_open_api_ok': True},
])
def test_the_api_is_safe_on_loopback_with_a_key_or_open_on_purpose(knobs):
    assert FILTERS['vllm_api_problems'](knobs) == []


@pytest.mark.parametrize('knobs', [{}, {'runtime_vllm_host': '192.168.100.1'}, {'runtime_vllm_api_key': '  '}])
def test_an_open_api_beyond_loopback_names_the_key_and_the_opt_out(knobs):
    problems = FILTERS['vllm_api_problems'](knobs)
    assert len(problems) == 1
    for word in ('runtime_vllm_host is', 'not loopback', 'runtime_vllm_api_key is empty', 'runtime_vllm_open_api_ok: true',
                 '/metrics', '/tokenize'):
        assert word in problems[0], problems


# ---------------------------------------------------------------------------- the node's own JIT caches

@pytest.mark.parametrize('kind', ['container', 'venv'])
def test_cache_env_under_the_nodes_cache_dir(kind):
    """VLLM_CACHE_ROOT, FLASHINFER_WORKSPACE_BASE, TILELANG_CACHE_DIR, TRITON_CACHE_DIR under runtime_cache_dir, both kinds;
    TMPDIR only for the venv (the container binds the same tmp subdirectory on /tmp, as the recipe's compose)."""
    env = serve_env({}, kind, cache_dir='/var/lib/dgxspark/vllm-cache/')
    assert {k: env[k] for k in CACHE_ENV_KEYS if k in env} == dict(
        [('VLLM_CACHE_ROOT', '/var/lib/dgxspark/vllm-cache/vllm'), ('FLASHINFER_WORKSPACE_BASE', '/var/lib/dgxspark/vllm-cache/flashinfer'),
         ('TILELANG_CACHE_DIR', '/var/lib/dgxspark/vllm-cache/tilelang'), ('TRITON_CACHE_DIR', '/var/lib/dgxspark/vllm-cache/triton')]
        + ([('TMPDIR', '/var/lib/dgxspark/vllm-cache/tmp')] if kind == 'venv' else []))
    assert not any(k in serve_env({}, kind) for k in CACHE_ENV_KEYS)   # no cache_dir: none of them


@pytest.mark.parametrize('bad', ['relative/path', '', '/', '/a/../b', '/with space', '/a:b', 5])
def test_cache_dir_must_be_a_plain_absolute_path(bad):
    with pytest.raises(VllmConfigError) as err:
        serve_env({}, 'venv', cache_dir=bad)
    assert str(err.value).startswith('runtime_cache_dir is ')


@pytest.mark.parametrize('key', CACHE_ENV_KEYS)
def test_env_knob_may_not_move_a_cache(key):
    with pytest.raises(VllmConfigError) as err:
        serve_env({'runtime_vllm_env': {key: '/shared/nfs/cache'}}, 'venv', cache_dir='/var/lib/dgxspark/vllm-cache')
    assert 'expected the JIT cache paths only from runtime_cache_dir' in str(err.value)
