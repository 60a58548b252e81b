# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM serve command of the Spark cluster: one source of truth (pure functions, no I/O).

Standard library only, Python 3.8+, never imports ``ansible`` (the filters in
``plugins/filter/vllm.py`` wrap these functions and turn ``VllmConfigError``
into ``AnsibleFilterError``).

The input is a dict of the ``runtime_vllm_*`` knobs (see ``KNOBS``; missing
keys take their default, keys that are not knobs are ignored)::

    {"runtime_vllm_model": "deepseek-ai/DeepSeek-V4-Flash-0731",
     "runtime_vllm_revision": "9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
     "runtime_vllm_max_num_seqs": 6, "runtime_vllm_mtp_num_tokens": 5, ...}

and the node's place in the cluster, from ``topology()``::

    {"role": "head", "node_rank": 0, "nnodes": 2, "master_addr": "192.168.100.1"}

``serve_argv()`` returns the argv of ``vllm serve`` (the venv runs it as is;
a container passes everything after ``command`` to an image whose entrypoint
is ``vllm serve``). Both ranks get the same engine arguments; only
``--node-rank`` and ``--headless`` differ. The API key is never part of argv:
vLLM reads ``VLLM_API_KEY`` from its environment (a 0600 environment file).

``serve_env()`` returns the static, non-secret environment of the recipe
(seed 004 ``.env.dspark`` / MIA compose). The per-host values (NCCL_IB_HCA,
NCCL_IB_GID_INDEX, socket interfaces, VLLM_HOST_IP) come from the nic role's
resolver at every start, never from here.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = [
    'VllmConfigError', 'KNOBS', 'KNOB_DEFAULTS', 'KINDS', 'PROFILES', 'KIND_ENV', 'CUDAGRAPH_MODES', 'KNOB_PREFIX', 'PER_HOST_ENV_KEYS', 'STATIC_ENV',
    'CACHE_ENV', 'CACHE_ENV_KEYS', 'cache_env',
    'MAX_MODEL_LEN_CEILING', 'MIN_MTP_0731', 'RECOMMENDED_MAX_NUM_SEQS', 'GPU_MEMORY_UTILIZATION_CEILING',
    'KV_CACHE_DTYPES', 'DRAFT_SAMPLE_METHODS', 'DEFAULT_THINKING', 'OWNED_FLAGS',
    'REQUIRED_BLOCK_SIZE', 'REPO_0731', 'REVISION_0731', 'api_layout', 'api_problems', 'is_0731',
    'resolve_knobs', 'serve_argv', 'serve_warnings', 'serve_env', 'topology',
    'speculative_config', 'cudagraph_capture_size',
]

KNOB_PREFIX = 'runtime_vllm_'

MAX_MODEL_LEN_CEILING = 1048576          # the model's architectural maximum (1M)
REPO_0731 = 'deepseek-ai/DeepSeek-V4-Flash-0731'   # the official 0731 checkpoint ...
REVISION_0731 = '9e165c30e2704aec5d9d593cce3eebd58bbef1cb'  # ... and its pinned commit (seed 004)
REQUIRED_BLOCK_SIZE = 256                # seed 000 #1/#2: the main KV store stays at 256
MIN_MTP_0731 = 5                         # 0731 checkpoint: dspark_block_size 5; fewer truncates the draft blocks
RECOMMENDED_MAX_NUM_SEQS = 6             # seed 003: fewer shrinks the captured graphs (-1/3 decode)
GPU_MEMORY_UTILIZATION_CEILING = 0.87    # never above ~0.86-0.87 on a Spark (platform facts "Memory")
KV_CACHE_DTYPES = ('fp8_ds_mla', 'nvfp4_ds_mla')
DRAFT_SAMPLE_METHODS = ('probabilistic', 'greedy')
DEFAULT_THINKING = {
    'off': {'thinking': False},
    'low': {'thinking': True, 'reasoning_effort': 'low'},
    'high': {'thinking': True, 'reasoning_effort': 'high'},
    'max': {'thinking': True, 'reasoning_effort': 'max'},
}

# name (without prefix), default, kind, description. kind: str | nonempty | int | float | bool | list | dict
# Ranges and choices are checked in resolve_knobs(). The runtime/service roles
# declare the same names and defaults in defaults/main.yml and meta/argument_specs.yml.
KNOBS = (
    ('model', 'deepseek-ai/DeepSeek-V4-Flash-0731', 'nonempty',
     'Hugging Face repo id (read from the HF cache) or a local checkpoint directory; the positional MODEL of vllm serve.'),
    ('revision', '9e165c30e2704aec5d9d593cce3eebd58bbef1cb', 'str',
     'Checkpoint commit (--revision); empty leaves the flag out (tip of main).'),
    ('served_model_name', 'deepseek-v4-flash-0731', 'nonempty', 'Name clients send as model (--served-model-name).'),
    ('host', '0.0.0.0', 'nonempty', 'Address the API binds (--host); 127.0.0.1 for head-only tests.'),
    ('port', 8888, 'int', 'API port: where clients connect (vLLM\'s --port, or the API proxy\'s when one fronts it).'),
    ('backend_port', 8889, 'int', 'Loopback port vLLM serves on behind the API proxy (--port then; host beyond loopback, '
     'not open_api_ok).'),
    ('master_port', 25000, 'int', 'Rendezvous port on the head\'s fabric address (--master-port).'),
    ('tensor_parallel_size', None, 'int', 'Tensor-parallel size; null = the number of nodes (one GB10 GPU per node).'),
    ('attention_group_pad', False, 'bool', 'The runtime carries the 3-node attention-group pad (groups 8 -> 9, heads 64 -> 72: '
     'the DSpark recipe\'s start-tp3.sh); tensor parallel 3 only with it.'),
    ('kv_cache_dtype', 'nvfp4_ds_mla', 'str', 'KV cache dtype (--kv-cache-dtype), fp8_ds_mla or nvfp4_ds_mla.'),
    ('block_size', 256, 'int', 'KV block size (--block-size); only 256 unless block_size_override.'),
    ('block_size_override', False, 'bool', 'Allow a block size other than 256 (seed 000 #1/#2 refuse it).'),
    ('max_model_len', MAX_MODEL_LEN_CEILING, 'int', 'Per-request context ceiling (--max-model-len), at most 1048576.'),
    ('max_num_seqs', None, 'int', 'Concurrent sequences (--max-num-seqs); null = the runtime kind\'s profile (container 6, venv 12); '
     'below 6 shrinks the captured graphs.'),
    ('max_num_batched_tokens', 8192, 'int', 'Prefill tokens per step (--max-num-batched-tokens).'),
    ('long_prefill_token_threshold', 1024, 'int', 'Long-prefill chunk cap (--long-prefill-token-threshold); 0 lets one prefill starve decode.'),
    ('enable_chunked_prefill', True, 'bool', '--enable-chunked-prefill (false: --no-enable-chunked-prefill).'),
    ('async_scheduling', True, 'bool', '--async-scheduling.'),
    ('enable_prefix_caching', True, 'bool', '--enable-prefix-caching (false: --no-enable-prefix-caching).'),
    ('gpu_memory_utilization', 0.835, 'float', 'Share of the unified memory vLLM may use (--gpu-memory-utilization), in (0, 0.87].'),
    ('mtp_num_tokens', MIN_MTP_0731, 'int', 'DSpark draft depth (num_speculative_tokens); at least 5 for the 0731 checkpoint.'),
    ('draft_sample_method', 'probabilistic', 'str', 'DSpark draft sampling, probabilistic or greedy.'),
    ('trust_remote_code', True, 'bool', '--trust-remote-code.'),
    ('tokenizer_mode', None, 'str', '--tokenizer-mode; empty leaves it out; null = the kind\'s profile (deepseek_v4 for both: '
     'DeepSeek ships no Jinja chat template, so chat needs the deepseek_v4 encoder).'),
    ('moe_backend', None, 'str', '--moe-backend; empty leaves it out; null = the kind\'s profile (container flashinfer_b12x, '
     'venv marlin).'),
    ('tool_call_parser', 'deepseek_v4', 'str', '--tool-call-parser with --enable-auto-tool-choice; empty leaves both out.'),
    ('reasoning_parser', 'deepseek_v4', 'str', '--reasoning-parser; empty leaves it out.'),
    ('default_thinking', 'max', 'str', 'Default thinking (off, low, high, max) -> --default-chat-template-kwargs; empty leaves it out.'),
    ('generation_config', 'vllm', 'str', '--generation-config; empty leaves it out.'),
    ('flashinfer_autotune', None, 'bool', '--enable-flashinfer-autotune; null = the kind\'s profile (container true, venv false).'),
    ('cudagraph_mode', None, 'str', 'CUDA graph mode (--compilation-config {"cudagraph_mode": ...}); empty leaves it out; null = '
     'the kind\'s profile (container empty: the image\'s default, venv FULL_AND_PIECEWISE).'),
    ('extra_args', [], 'list', 'More vllm serve arguments, appended as given (never --api-key, never a flag set by a knob).'),
    ('hf_hub_offline', True, 'bool', 'HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE = 1 (set after both caches are complete).'),
    ('open_api_ok', False, 'bool', 'Serve the API on a non-loopback host without an API key (an explicit opt-out).'),
    ('env', {}, 'dict', 'More environment for vLLM, merged over the static recipe environment (never VLLM_API_KEY, never a per-host key).'),
)
KNOB_DEFAULTS = dict((KNOB_PREFIX + name, default) for name, default, _kind, _doc in KNOBS)

# The runtime kinds and the serving stack each reproduces. A knob whose default is null takes its kind's value here.
KINDS = ('container', 'venv')
PROFILES = {
    # Seed 004's stack: the Anemll image (ghcr.io/anemll/dspark-vllm-gx10:0.1.1) run by the recipe's
    # docker-compose.dspark.yml (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark @ 489af95): --max-num-seqs
    # ${MAX_NUM_SEQS:-6}, --tokenizer-mode deepseek_v4, --moe-backend flashinfer_b12x, --enable-flashinfer-autotune,
    # no --compilation-config (VLLM_USE_BREAKABLE_CUDAGRAPH=0 picks the image's graphs).
    'container': {'max_num_seqs': RECOMMENDED_MAX_NUM_SEQS, 'tokenizer_mode': 'deepseek_v4', 'moe_backend': 'flashinfer_b12x',
                  'flashinfer_autotune': True, 'cudagraph_mode': ''},
    # Seed 000's stack: a plain venv on vLLM 0.27.1 (fork branch port-0271), CUDA 13.3: "Marlin MXFP4 MoE,
    # FULL_AND_PIECEWISE CUDA graphs", "max_num_seqs back at 12" after the block-zeroer fix (finding #12). No FlashInfer
    # autotune (it tunes the b12x/FlashInfer MoE the venv does not run). --tokenizer-mode deepseek_v4 as the recipe
    # passes it: the 0731 repository ships no Jinja chat template (recipe docs/DEEPSEEK_V4_FLASH_0731.md @ 489af95), so
    # only the deepseek_v4 renderer (vllm/renderers/registry.py, vllm/tokenizers/deepseek_v4.py) serves chat. vLLM
    # 0.27.1's "auto" picks the same mode for DeepseekV4ForCausalLM (vllm/config/model.py), but only from config.json's
    # architecture; the explicit flag does not depend on it (and on no fork keeping that default).
    'venv': {'max_num_seqs': 12, 'tokenizer_mode': 'deepseek_v4', 'moe_backend': 'marlin', 'flashinfer_autotune': False,
             'cudagraph_mode': 'FULL_AND_PIECEWISE'},
}
CUDAGRAPH_MODES = ('NONE', 'PIECEWISE', 'FULL', 'FULL_DECODE_ONLY', 'FULL_AND_PIECEWISE')

# Flags the knobs and the topology set: extra_args may not repeat them (argparse keeps the last one, silently).
OWNED_FLAGS = (
    '--revision', '--served-model-name', '--host', '--port', '--tensor-parallel-size', '-tp',
    '--distributed-executor-backend', '--nnodes', '--node-rank', '--master-addr', '--master-port', '--headless',
    '--kv-cache-dtype', '--block-size', '--max-model-len', '--max-num-seqs', '--max-num-batched-tokens',
    '--long-prefill-token-threshold', '--max-cudagraph-capture-size', '--gpu-memory-utilization',
    '--enable-chunked-prefill', '--no-enable-chunked-prefill', '--async-scheduling', '--no-async-scheduling',
    '--enable-prefix-caching', '--no-enable-prefix-caching', '--speculative-config', '--trust-remote-code',
    '--tokenizer-mode', '--moe-backend', '--tool-call-parser', '--enable-auto-tool-choice', '--reasoning-parser',
    '--default-chat-template-kwargs', '--generation-config', '--enable-flashinfer-autotune', '--model',
    '--no-enable-flashinfer-autotune',
)
# Owned only while runtime_vllm_cudagraph_mode sets it (empty: extra_args may carry a compilation config).
COMPILATION_FLAGS = ('--compilation-config', '-O')
SECRET_FLAGS = ('--api-key',)

# Static, non-secret environment of the recipe (seed 004 / MIA .env.dspark.example and compose;
# platform facts "NIC and fabric"). Values are strings, as in an environment file. The recipe's static
# fabric knobs (NCCL_NET, NCCL_IB_DISABLE, NCCL_CROSS_NIC, ...) are not here: the nic role owns them
# (nic_nccl_static_env), and its resolver's file, read after this one, carries them with the per-host values.
STATIC_ENV = (
    ('NCCL_DEBUG', 'WARN'),
    ('VLLM_USE_BREAKABLE_CUDAGRAPH', '0'),          # seed 004: keep 0; unset enables the slower breakable graphs
    ('VLLM_PREFIX_CACHE_RETENTION_INTERVAL', '4096'),  # seed 004: issue #26 SWA prefix-cache spacing
    ('VLLM_ALLOW_LONG_MAX_MODEL_LEN', '1'),         # MIA compose: the 1M ceiling
    ('HF_HUB_DISABLE_XET', '1'),                    # MIA compose; Xet's shared store leaves dangling links in copies
    ('PYTORCH_CUDA_ALLOC_CONF', 'expandable_segments:True'),
)

# The CUDA-arch and compile knobs of each kind ("NCCL/RoCE, CUDA arch, and compile knobs stay in the example
# file", seed 004). GB10 is sm_121a (seed 000, platform facts).
KIND_ENV = {
    # The recipe's docker-compose.dspark.yml @ 489af95 (environment:, each the compose's ${VAR:-default}).
    'container': (
        ('TORCH_CUDA_ARCH_LIST', '12.1a'),             # compose; .env.dspark.example: torch extensions for GB10
        ('FLASHINFER_CUDA_ARCH_LIST', '12.1a'),        # compose: FlashInfer JIT for GB10
        ('CUTE_DSL_ARCH', 'sm_121a'),                  # compose: without it b12x/CuTeDSL may JIT a slower W4A16 MoE path
        ('VLLM_USE_B12X_MOE', '1'),                    # compose: the b12x MoE of --moe-backend flashinfer_b12x
        ('VLLM_USE_FLASHINFER_SAMPLER', '1'),          # compose
        ('VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS', '1800'),  # compose (issue #65/#87): a mid-serve JIT outlasts the 300 s default
        ('VLLM_SPARSE_INDEXER_MAX_LOGITS_MB', '256'),  # compose
        ('VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS', '0'),  # compose
        ('FLASHINFER_DISABLE_VERSION_CHECK', '1'),     # compose
        ('TILELANG_CLEANUP_TEMP_FILES', '1'),          # compose
        ('DG_JIT_USE_NVRTC', '0'),                     # compose
        ('DG_JIT_NVCC_COMPILER', '/usr/local/cuda/bin/nvcc'),  # compose (the image's CUDA)
    ),
    # Seed 000's venv (vLLM 0.27.1 port-0271, CUDA 13.3 from roles/cuda's environment file). No VLLM_MXFP4_USE_MARLIN:
    # vLLM #44992 removed it before 0.27 (vllm/envs.py of the 0.27.1 wheel has no such variable and no module reads it);
    # the Marlin MXFP4 MoE of seed 000 is --moe-backend marlin (the venv profile above).
    'venv': (
        ('TORCH_CUDA_ARCH_LIST', '12.1a'),             # seed 000: GB10 is sm_121a; extensions built in the venv target it
        ('FLASHINFER_CUDA_ARCH_LIST', '12.1a'),        # seed 000: sm_121a, for FlashInfer's JIT (attention kernels)
    ),
}

# The JIT, autotune and compile caches (both kinds), each a subdirectory of the node's own runtime_cache_dir
# (never shared between nodes, never copied). The recipe's compose @ 489af95 keeps the first three on its volume
# (VLLM_CACHE_ROOT=/cache/huggingface/vllm-cache, FLASHINFER_WORKSPACE_BASE=/cache/huggingface/flashinfer,
# TILELANG_CACHE_DIR=/cache/huggingface/tilelang-cache: "in-image ~/.tilelang/cache dies on container recreate",
# its docs/ENVS.md). TRITON_CACHE_DIR is Triton's own (python/triton/knobs.py: default $TRITON_HOME/.triton/cache,
# TRITON_HOME = ~); vLLM's own Triton kernels and their autotune results (TRITON_CACHE_AUTOTUNING=1, vllm/env_override.py)
# land there; the torch.compile path redirects it under VLLM_CACHE_ROOT by itself (vllm/compilation/compiler_interface.py).
CACHE_ENV = (
    ('VLLM_CACHE_ROOT', 'vllm'),
    ('FLASHINFER_WORKSPACE_BASE', 'flashinfer'),
    ('TILELANG_CACHE_DIR', 'tilelang'),
    ('TRITON_CACHE_DIR', 'triton'),
)
# The temp directory's subdirectory: the container kind binds it on /tmp as the recipe does (DSPARK_TMP_HOST:/tmp); the
# venv kind points TMPDIR at it. What defaults to the temp dir (tempfile.gettempdir()): torch inductor's cache outside
# vLLM's compile path (torch/_inductor/runtime/cache_dir_utils.py: <tmp>/torchinductor_<user>), the CuTe DSL cache of
# vLLM's flash-attention (vllm/vllm_flash_attn/cute/cache_utils.py: <tmp>/<user>/flash_attention_cute_dsl_cache).
CACHE_TMP_SUBDIR = 'tmp'
CACHE_ENV_KEYS = tuple(key for key, _sub in CACHE_ENV) + ('TMPDIR',)

# Written per host at every start by the nic role's resolver (roce_gids.NCCL_ENV_KEYS + NCCL_AUTO_KEYS):
# an environment knob may not set them, or a stale value would mask the live GID table.
PER_HOST_ENV_KEYS = (
    'NCCL_IB_HCA', 'NCCL_IB_GID_INDEX', 'NCCL_SOCKET_IFNAME', 'GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'VLLM_HOST_IP',
    'NCCL_IB_ADDR_FAMILY', 'NCCL_IB_ROCE_VERSION_NUM', 'NCCL_IB_ADDR_RANGE',
)
SECRET_ENV_KEYS = ('VLLM_API_KEY', 'HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN')

_ENV_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_SHA_RE = re.compile(r'^[0-9a-f]{40}$')


class VllmConfigError(ValueError):
    """A knob or topology value is wrong; the message names the variable, what was found and what was expected."""


def _text(value: Any) -> str:
    return u'%s' % (value,)


def _found(value: Any) -> str:
    """``'6' (str)`` style rendering of a bad value."""
    if isinstance(value, str):
        return '%r (str)' % (_text(value),)
    return '%r (%s)' % (value, type(value).__name__)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_kind(var: str, value: Any, kind: str) -> Any:
    if kind == 'bool':
        if not isinstance(value, bool):
            raise VllmConfigError('%s is %s, expected a boolean (true or false)' % (var, _found(value)))
        return value
    if kind == 'int':
        if not _is_int(value):
            raise VllmConfigError('%s is %s, expected an integer' % (var, _found(value)))
        return int(value)
    if kind == 'float':
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise VllmConfigError('%s is %s, expected a number' % (var, _found(value)))
        return float(value)
    if kind in ('str', 'nonempty'):
        if not isinstance(value, str):
            raise VllmConfigError('%s is %s, expected a string' % (var, _found(value)))
        value = _text(value).strip()
        if kind == 'nonempty' and not value:
            raise VllmConfigError('%s is empty, expected a non-empty string' % var)
        return value
    if kind == 'list':
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise VllmConfigError('%s is %s, expected a list of strings' % (var, _found(value)))
        for idx, item in enumerate(value):
            if not isinstance(item, str):
                raise VllmConfigError('%s[%d] is %s, expected a string' % (var, idx, _found(item)))
        return [_text(item) for item in value]
    if kind == 'dict':
        if not isinstance(value, Mapping):
            raise VllmConfigError('%s is %s, expected a dict' % (var, _found(value)))
        return dict(value)
    raise AssertionError(kind)  # pragma: no cover - table error


def _range(var: str, value: Any, low: Optional[float] = None, high: Optional[float] = None, what: str = '') -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            bounds = 'between %s and %s' % (low, high)
        elif low is not None:
            bounds = 'at least %s' % (low,)
        else:
            bounds = 'at most %s' % (high,)
        raise VllmConfigError('%s is %r, expected %s%s' % (var, value, bounds, what))


def is_0731(model: str, revision: str) -> bool:
    """Whether vLLM serves the 0731 checkpoint: by repo id and revision, never by a substring of a path.

    The pinned repo id, or the pinned commit, is the 0731 checkpoint; a local directory names no repo, so it
    counts as 0731 (the worst case for the draft-depth check).

    >>> is_0731('deepseek-ai/DeepSeek-V4-Flash-0731', ''), is_0731('/srv/models/any', ''), is_0731('org/other', '')
    (True, True, False)
    >>> is_0731('org/not-0731-either', REVISION_0731)
    True
    """
    if model.startswith(('/', '.', '~')):
        return True
    return model.lower() == REPO_0731.lower() or revision == REVISION_0731


def _check_runtime_kind(runtime_kind: Any) -> str:
    if runtime_kind not in KINDS:
        raise VllmConfigError('runtime_kind is %s, expected one of %s' % (_found(runtime_kind), ', '.join(KINDS)))
    return runtime_kind


def resolve_knobs(knobs: Optional[Mapping[str, Any]], runtime_kind: str = 'container') -> Dict[str, Any]:
    """Validate the ``runtime_vllm_*`` knobs; returns them by short name with defaults applied.

    A knob whose default is null and that the kind's profile (``PROFILES``) names takes the profile's value
    when it is missing or null.

    >>> resolve_knobs({'runtime_vllm_max_num_seqs': 4})['max_num_seqs']
    4
    >>> resolve_knobs({}, 'venv')['max_num_seqs']
    12
    """
    if knobs is None:
        knobs = {}
    if not isinstance(knobs, Mapping):
        raise VllmConfigError('the vLLM knobs are %s, expected a dict of runtime_vllm_* variables' % _found(knobs))
    profile = PROFILES[_check_runtime_kind(runtime_kind)]
    conf = {}  # type: Dict[str, Any]
    for name, default, kind, _doc in KNOBS:
        var = KNOB_PREFIX + name
        value = knobs.get(var, default)
        if value is None and name in profile:
            value = profile[name]
        if value is None and default is None:
            conf[name] = None
            continue
        conf[name] = _check_kind(var, value, kind)

    p = KNOB_PREFIX
    _range(p + 'port', conf['port'], 1, 65535)
    _range(p + 'master_port', conf['master_port'], 1, 65535)
    _range(p + 'backend_port', conf['backend_port'], 1, 65535)
    if conf['tensor_parallel_size'] is not None:
        _range(p + 'tensor_parallel_size', conf['tensor_parallel_size'], 1)
    if conf['kv_cache_dtype'] not in KV_CACHE_DTYPES:
        raise VllmConfigError('%skv_cache_dtype is %r, expected one of %s (the DeepSeek-V4 sparse-MLA layouts)'
                              % (p, conf['kv_cache_dtype'], ', '.join(KV_CACHE_DTYPES)))
    _range(p + 'block_size', conf['block_size'], 1)
    if conf['block_size'] != REQUIRED_BLOCK_SIZE and not conf['block_size_override']:
        raise VllmConfigError('%sblock_size is %d, expected %d: the DeepSeek-V4 main KV store runs at %d (seed 000 #1/#2: block 64 '
                              'makes the compressed-MLA storage block 64 // 128 = 0, a ZeroDivisionError; the sliding-window cache '
                              'keeps its own 64); set %sblock_size_override: true to try another'
                              % (p, conf['block_size'], REQUIRED_BLOCK_SIZE, REQUIRED_BLOCK_SIZE, p))
    _range(p + 'max_model_len', conf['max_model_len'], 1, MAX_MODEL_LEN_CEILING, ' (the model\'s 1M-token maximum)')
    _range(p + 'max_num_seqs', conf['max_num_seqs'], 1)
    _range(p + 'max_num_batched_tokens', conf['max_num_batched_tokens'], 1)
    _range(p + 'long_prefill_token_threshold', conf['long_prefill_token_threshold'], 0)
    util = conf['gpu_memory_utilization']
    if not 0 < util <= GPU_MEMORY_UTILIZATION_CEILING:
        raise VllmConfigError('%sgpu_memory_utilization is %r, expected more than 0 and at most %s (a Spark thrashes above '
                              '~0.87 of its unified memory; the recipe uses 0.835)' % (p, util, GPU_MEMORY_UTILIZATION_CEILING))
    min_mtp = MIN_MTP_0731 if is_0731(conf['model'], conf['revision']) else 1
    if conf['mtp_num_tokens'] < min_mtp:
        if min_mtp == MIN_MTP_0731:
            raise VllmConfigError('%smtp_num_tokens is %d, expected at least %d for the 0731 checkpoint %s (its dspark_block_size '
                                  'is %d; fewer truncates the draft blocks)'
                                  % (p, conf['mtp_num_tokens'], MIN_MTP_0731, conf['model'], MIN_MTP_0731))
        _range(p + 'mtp_num_tokens', conf['mtp_num_tokens'], 1)
    if conf['draft_sample_method'] not in DRAFT_SAMPLE_METHODS:
        raise VllmConfigError('%sdraft_sample_method is %r, expected one of %s'
                              % (p, conf['draft_sample_method'], ', '.join(DRAFT_SAMPLE_METHODS)))
    if conf['default_thinking'] and conf['default_thinking'] not in DEFAULT_THINKING:
        raise VllmConfigError('%sdefault_thinking is %r, expected one of %s (or empty to leave the flag out)'
                              % (p, conf['default_thinking'], ', '.join(DEFAULT_THINKING)))
    if conf['max_num_batched_tokens'] < conf['max_num_seqs']:
        raise VllmConfigError('%smax_num_batched_tokens is %d, expected at least %smax_num_seqs (%d)'
                              % (p, conf['max_num_batched_tokens'], p, conf['max_num_seqs']))
    if not conf['enable_chunked_prefill'] and conf['max_num_batched_tokens'] < conf['max_model_len']:
        raise VllmConfigError('%smax_num_batched_tokens is %d, expected at least %smax_model_len (%d) when %senable_chunked_prefill '
                              'is false (a prompt must fit one step)'
                              % (p, conf['max_num_batched_tokens'], p, conf['max_model_len'], p))
    if conf['revision'] and re.search(r'\s', conf['revision']):
        raise VllmConfigError('%srevision is %r, expected a commit sha (40 hex digits), a branch or tag name, or empty' % (p, conf['revision']))
    if conf['cudagraph_mode'] and conf['cudagraph_mode'] not in CUDAGRAPH_MODES:
        raise VllmConfigError('%scudagraph_mode is %r, expected one of %s (or empty to leave it out)'
                              % (p, conf['cudagraph_mode'], ', '.join(CUDAGRAPH_MODES)))
    for idx, arg in enumerate(conf['extra_args']):
        flag = arg.split('=', 1)[0]
        if conf['cudagraph_mode'] and (flag in COMPILATION_FLAGS or flag.startswith('-O')):
            raise VllmConfigError('%sextra_args[%d] is %r, expected no compilation config while %scudagraph_mode is %r (it sets '
                                  '--compilation-config; empty it to pass your own)' % (p, idx, flag, p, conf['cudagraph_mode']))
        if flag in SECRET_FLAGS:
            raise VllmConfigError('%sextra_args[%d] is %s, expected no API key in argv (it shows in ps and the journal): put it in the '
                                  'environment file as VLLM_API_KEY' % (p, idx, flag))
        if flag in OWNED_FLAGS:
            raise VllmConfigError('%sextra_args[%d] is %r, expected a flag no knob sets (set it with its runtime_vllm_* knob instead)'
                                  % (p, idx, flag))
    for key, value in conf['env'].items():
        where = '%senv.%s' % (p, key)
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            raise VllmConfigError('%senv has the key %r, expected environment variable names ([A-Za-z_][A-Za-z0-9_]*)' % (p, key))
        if key in SECRET_ENV_KEYS:
            raise VllmConfigError('%s is set, expected secrets only in the service\'s 0600 secret environment file (not in %senv)'
                                  % (where, p))
        if key in PER_HOST_ENV_KEYS:
            raise VllmConfigError('%s is set, expected the per-host fabric values only from the nic resolver (/run/dgxspark/nccl.env, '
                                  'rewritten at every start from the live GID table)' % where)
        if key in CACHE_ENV_KEYS:
            raise VllmConfigError('%s is set, expected the JIT cache paths only from runtime_cache_dir (each node\'s own '
                                  'persistent directory)' % where)
        if isinstance(value, bool):
            continue
        if not isinstance(value, (str, int, float)):
            raise VllmConfigError('%s is %s, expected a string or a number' % (where, _found(value)))
        if any(c in _text(value) for c in '\r\n\0'):
            raise VllmConfigError('%s contains a line break or NUL, expected a one-line value' % where)
    return conf


_LOOPBACK = ('localhost', '::1', 'ip6-localhost')


def _loopback(host: str) -> bool:
    return host in _LOOPBACK or bool(re.match(r'^127\.[0-9]+\.[0-9]+\.[0-9]+$', host))


def api_layout(knobs: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Where vLLM listens and whether the API proxy fronts it (the one place this is decided).

    vLLM's ``--api-key`` guards the ``/v1`` routes only (0.27.1 and the recipe's image: ``if not
    url_path.startswith("/v1")``; newer releases guard more but leave /metrics, /version, /load public):
    ``/invocations`` (its SageMaker router: chat and completions), ``/tokenize``, ``/metrics`` and the pooling
    routes answer anyone who reaches the port. So a host beyond loopback is served by the API proxy
    (roles/service, the distribution's haproxy): it listens on ``host:port``, passes ``/v1/`` and ``/health`` from
    anywhere and every route from loopback, and vLLM binds ``127.0.0.1:backend_port``. A loopback host, or
    ``open_api_ok`` (the explicit opt-out), binds vLLM itself on ``host:port`` with every route open.

    >>> api_layout({})['proxy'], api_layout({})['vllm_host'], api_layout({})['vllm_port']
    (True, '127.0.0.1', 8889)
    >>> api_layout({'runtime_vllm_host': '127.0.0.1'})['proxy']
    False
    """
    conf = resolve_knobs(knobs)
    proxy = not _loopback(conf['host']) and not conf['open_api_ok']
    if proxy and conf['backend_port'] == conf['port']:
        message = ('%sbackend_port is %d, the same as %sport: vLLM listens on the backend port behind the API proxy, which '
                   'holds %sport; expected another port')
        raise VllmConfigError(message % (KNOB_PREFIX, conf['backend_port'], KNOB_PREFIX, KNOB_PREFIX))
    return {'proxy': proxy, 'host': conf['host'], 'port': conf['port'],
            'vllm_host': '127.0.0.1' if proxy else conf['host'],
            'vllm_port': conf['backend_port'] if proxy else conf['port']}


def api_problems(knobs: Optional[Mapping[str, Any]]) -> List[str]:
    """The API binds beyond loopback without a key: one message naming both ways out; empty when safe.

    >>> api_problems({'runtime_vllm_host': '127.0.0.1'}), api_problems({'runtime_vllm_api_key': 'k' * 20})
    ([], [])
    """
    conf = resolve_knobs(knobs)
    secret = (knobs or {}).get(KNOB_PREFIX + 'api_key') if isinstance(knobs, Mapping) else None
    if _loopback(conf['host']) or (isinstance(secret, str) and secret.strip()) or conf['open_api_ok']:
        return []
    return ['%shost is %s (not loopback) and %sapi_key is empty: anyone who reaches port %d can use the API; set %sapi_key '
            '(vault it; the API proxy then passes only /v1 and /health beyond loopback) or, to serve it open on purpose, '
            '%sopen_api_ok: true (vLLM itself on that address: every route open, /invocations, /tokenize, /metrics ...)'
            % (KNOB_PREFIX, conf['host'], KNOB_PREFIX, conf['port'], KNOB_PREFIX, KNOB_PREFIX)]


def speculative_config(mtp_num_tokens: int, draft_sample_method: str = 'probabilistic') -> str:
    """The DSpark ``--speculative-config`` JSON, in seed 004's shape and key order.

    >>> speculative_config(5)
    '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic"}'
    """
    return json.dumps({'method': 'dspark', 'num_speculative_tokens': int(mtp_num_tokens),
                       'draft_sample_method': _text(draft_sample_method)}, separators=(',', ':'))


def cudagraph_capture_size(max_num_seqs: int, mtp_num_tokens: int) -> int:
    """``--max-cudagraph-capture-size`` = max_num_seqs x (MTP + 1) (seed 004: 36 at 6 x 5).

    >>> cudagraph_capture_size(6, 5)
    36
    """
    return int(max_num_seqs) * (int(mtp_num_tokens) + 1)


# DeepSeek-V4-Flash splits its attention output in 8 groups (config.json o_groups), which vLLM shards by tensor
# parallel rank: at TP=3 stock vLLM computes 8 // 3 == 2 groups per rank, silently drops six of the eight and serves
# fluent nonsense. The 3-node recipes pad the groups to 9 (heads 64 -> 72, pad sinks -inf: localaiguyy's 3x recipe,
# vendored by the DSpark recipe's start-tp3.sh, MiaAI-Lab PR #196), which only an image that carries the pad can serve.
# The public 4-node clusters run TP=4 (8 // 4 == 2, exact); no public recipe serves this model on 5 to 7 nodes.
ATTENTION_GROUPS = 8
PADDED_TP = (3,)


def _layout_applies(model: str) -> bool:
    """The model's 8 groups constrain the layout: a DeepSeek-V4 repo id, or a local directory (the worst case)."""
    return model.startswith(('/', '.', '~')) or 'deepseek-v4' in model.lower()


def layout_problems(knobs: Optional[Mapping[str, Any]], nnodes: int, runtime_kind: str = 'container') -> List[str]:
    """Why the parallel layout cannot serve the model on ``nnodes`` nodes (empty: it can).

    TP spans the nodes (one GB10 GPU each, no pipeline parallel: no public recipe runs this model with PP) and must
    divide the model's 8 attention groups, or be 3 with ``attention_group_pad``.

    >>> layout_problems({}, 4), layout_problems({'runtime_vllm_attention_group_pad': True}, 3)
    ([], [])
    >>> layout_problems({}, 3)[0][:60]
    'tensor parallel 3 (3 nodes) does not divide the 8 attention '
    """
    conf = resolve_knobs(knobs, runtime_kind)
    tp = nnodes if conf['tensor_parallel_size'] is None else conf['tensor_parallel_size']
    if tp != nnodes:
        return ['%stensor_parallel_size is %d, expected %d: the number of nodes in the inventory (spark_head + '
                'spark_workers), one GB10 GPU each' % (KNOB_PREFIX, tp, nnodes)]
    if not _layout_applies(conf['model']) or ATTENTION_GROUPS % tp == 0:
        return []
    if tp in PADDED_TP and conf['attention_group_pad']:
        return []
    return ['tensor parallel %d (%d nodes) does not divide the %d attention groups of %s: stock vLLM would compute %d // %d '
            '= %d groups per rank and serve wrong answers without an error. Expected 2, 4 or 8 nodes%s'
            % (tp, nnodes, ATTENTION_GROUPS, conf['model'], ATTENTION_GROUPS, tp, ATTENTION_GROUPS // tp,
               '; or, on 3 nodes, a runtime that carries the attention-group pad (groups 8 -> 9, the DSpark recipe\'s '
               'start-tp3.sh) and %sattention_group_pad: true' % KNOB_PREFIX if tp in PADDED_TP else
               ' (no public recipe serves this model on %d nodes)' % nnodes)]


def _check_topology(role: Any, node_rank: Any, nnodes: Any, master_addr: Any) -> None:
    if role not in ('head', 'worker'):
        raise VllmConfigError('role is %s, expected head or worker' % _found(role))
    if not _is_int(nnodes):
        raise VllmConfigError('nnodes is %s, expected an integer (the number of hosts in spark_head + spark_workers)' % _found(nnodes))
    if nnodes < 2:
        raise VllmConfigError('nnodes is %d, expected at least 2 (one head and at least one worker)' % nnodes)
    if not _is_int(node_rank):
        raise VllmConfigError('node_rank is %s, expected an integer' % _found(node_rank))
    if role == 'head' and node_rank != 0:
        raise VllmConfigError('node_rank is %d for the head, expected 0 (the head is rank 0)' % node_rank)
    if role == 'worker' and not 1 <= node_rank < nnodes:
        raise VllmConfigError('node_rank is %d for a worker, expected 1..%d (workers in spark_workers order)' % (node_rank, nnodes - 1))
    try:
        ipaddress.ip_address(_text(master_addr))
    except ValueError:
        raise VllmConfigError('master_addr is %s, expected the head\'s fabric IP address '
                              '(preflight_topology.nodes[host].master_addr)' % _found(master_addr))


def serve_argv(knobs: Optional[Mapping[str, Any]], role: Optional[str] = None, node_rank: Optional[int] = None,
               nnodes: Optional[int] = None, master_addr: Optional[str] = None,
               command: Optional[Sequence[str]] = None, topology: Optional[Mapping[str, Any]] = None,
               runtime_kind: str = 'container') -> List[str]:
    """The argv of ``vllm serve`` for one node.

    ``topology`` (the dict ``topology()`` returns) supplies role, node_rank,
    nnodes and master_addr when they are not given. ``command`` is what comes
    before the model: ``['vllm', 'serve']`` by default, a venv path
    (``['/opt/vllm/bin/vllm', 'serve']``) or ``[]`` for an image whose
    entrypoint is ``vllm serve``.

    >>> serve_argv({}, 'worker', 1, 2, '192.168.100.1')[:3]
    ['vllm', 'serve', 'deepseek-ai/DeepSeek-V4-Flash-0731']
    """
    topo = dict(topology or {})
    role = topo.get('role') if role is None else role
    node_rank = topo.get('node_rank') if node_rank is None else node_rank
    nnodes = topo.get('nnodes') if nnodes is None else nnodes
    master_addr = topo.get('master_addr') if master_addr is None else master_addr
    conf = resolve_knobs(knobs, runtime_kind)
    _check_topology(role, node_rank, nnodes, master_addr)
    problems = layout_problems(knobs, nnodes, runtime_kind)
    if problems:
        raise VllmConfigError(problems[0])
    tp = nnodes if conf['tensor_parallel_size'] is None else conf['tensor_parallel_size']
    if command is None:
        command = ['vllm', 'serve']
    if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple)) \
            or not all(isinstance(c, str) for c in command):
        raise VllmConfigError('command is %s, expected a list of strings (for example [vllm, serve])' % _found(command))

    argv = [_text(c) for c in command] + [conf['model']]
    if conf['revision']:
        argv += ['--revision', conf['revision']]
    layout = api_layout(knobs)
    argv += ['--served-model-name', conf['served_model_name'],
             '--host', layout['vllm_host'],
             '--port', str(layout['vllm_port'])]
    if conf['trust_remote_code']:
        argv.append('--trust-remote-code')
    argv += ['--tensor-parallel-size', str(tp),
             '--distributed-executor-backend', 'mp',
             '--nnodes', str(nnodes),
             '--node-rank', str(node_rank),
             '--master-addr', _text(master_addr),
             '--master-port', str(conf['master_port'])]
    if role == 'worker':
        argv.append('--headless')
    argv += ['--kv-cache-dtype', conf['kv_cache_dtype'],
             '--block-size', str(conf['block_size']),
             '--max-model-len', str(conf['max_model_len']),
             '--max-num-seqs', str(conf['max_num_seqs']),
             '--max-num-batched-tokens', str(conf['max_num_batched_tokens']),
             '--long-prefill-token-threshold', str(conf['long_prefill_token_threshold']),
             '--max-cudagraph-capture-size', str(cudagraph_capture_size(conf['max_num_seqs'], conf['mtp_num_tokens'])),
             '--gpu-memory-utilization', repr(conf['gpu_memory_utilization'])]
    argv.append('--enable-prefix-caching' if conf['enable_prefix_caching'] else '--no-enable-prefix-caching')
    argv.append('--enable-chunked-prefill' if conf['enable_chunked_prefill'] else '--no-enable-chunked-prefill')
    if conf['async_scheduling']:
        argv.append('--async-scheduling')
    argv += ['--speculative-config', speculative_config(conf['mtp_num_tokens'], conf['draft_sample_method'])]
    if conf['tokenizer_mode']:
        argv += ['--tokenizer-mode', conf['tokenizer_mode']]
    if conf['moe_backend']:
        argv += ['--moe-backend', conf['moe_backend']]
    if conf['tool_call_parser']:
        argv += ['--tool-call-parser', conf['tool_call_parser'], '--enable-auto-tool-choice']
    if conf['reasoning_parser']:
        argv += ['--reasoning-parser', conf['reasoning_parser']]
    if conf['default_thinking']:
        argv += ['--default-chat-template-kwargs',
                 json.dumps(DEFAULT_THINKING[conf['default_thinking']], separators=(',', ':'))]
    if conf['generation_config']:
        argv += ['--generation-config', conf['generation_config']]
    if conf['flashinfer_autotune']:
        argv.append('--enable-flashinfer-autotune')
    if conf['cudagraph_mode']:
        argv += ['--compilation-config', json.dumps({'cudagraph_mode': conf['cudagraph_mode']}, separators=(',', ':'))]
    argv += conf['extra_args']

    secret = (knobs or {}).get(KNOB_PREFIX + 'api_key') if isinstance(knobs, Mapping) else None
    secret = secret.strip() if isinstance(secret, str) else ''
    if secret and any(arg == secret or (len(secret) >= 8 and secret in arg) for arg in argv):
        raise VllmConfigError('%sapi_key appears in the vllm serve argv, expected it only in the 0600 environment file '
                              '(VLLM_API_KEY): check %sextra_args and the other knobs' % (KNOB_PREFIX, KNOB_PREFIX))
    return argv


def serve_warnings(knobs: Optional[Mapping[str, Any]], runtime_kind: str = 'container') -> List[str]:
    """Settings that start but cost speed or safety (validated like ``serve_argv``); empty when none.

    >>> serve_warnings({}) == []
    True
    """
    conf = resolve_knobs(knobs, runtime_kind)
    p = KNOB_PREFIX
    warnings = []
    if conf['max_num_seqs'] < RECOMMENDED_MAX_NUM_SEQS:
        warnings.append('%smax_num_seqs is %d (below %d): --max-cudagraph-capture-size follows it (%d instead of %d), decode falls '
                        'off the captured graphs and lost a third of its speed in seed 003 (62.5 -> 46.8 tok/s code). Keep %d even '
                        'for one user.'
                        % (p, conf['max_num_seqs'], RECOMMENDED_MAX_NUM_SEQS,
                           cudagraph_capture_size(conf['max_num_seqs'], conf['mtp_num_tokens']),
                           cudagraph_capture_size(RECOMMENDED_MAX_NUM_SEQS, conf['mtp_num_tokens']), RECOMMENDED_MAX_NUM_SEQS))
    if conf['long_prefill_token_threshold'] == 0:
        warnings.append('%slong_prefill_token_threshold is 0: one long prefill can take the whole batch and starve decode '
                        '(seed 004, issue #27); the recipe uses 1024' % p)
    if conf['revision'] and not _SHA_RE.match(conf['revision']):
        warnings.append('%srevision is %r, not a commit sha: the checkpoint can change under the same name; pin the 40-hex commit'
                        % (p, conf['revision']))
    if not conf['revision'] and not conf['model'].startswith('/'):
        warnings.append('%srevision is empty: vLLM serves whatever refs/main points to in the HF cache; pin the commit' % p)
    if not conf['hf_hub_offline']:
        warnings.append('%shf_hub_offline is false: a hub retry at start can re-fetch the checkpoint and fill the disk; set it '
                        'true once both caches are complete' % p)
    return warnings


def cache_env(cache_dir: Any, runtime_kind: str = 'container') -> Dict[str, str]:
    """The cache variables under ``cache_dir`` (``CACHE_ENV``; the venv kind's TMPDIR too: the container binds /tmp).

    >>> cache_env('/var/lib/dgxspark/vllm-cache', 'venv')['TRITON_CACHE_DIR']
    '/var/lib/dgxspark/vllm-cache/triton'
    """
    if not isinstance(cache_dir, str) or not cache_dir.startswith('/') or any(c in cache_dir for c in '\r\n\0 "\'$:'):
        raise VllmConfigError('runtime_cache_dir is %s, expected an absolute path without spaces, quotes, $ or :' % _found(cache_dir))
    parts = [part for part in cache_dir.split('/') if part]
    if not parts or '.' in parts or '..' in parts:
        raise VllmConfigError('runtime_cache_dir is %s, expected a normalised absolute path below / (no . or ..)' % _found(cache_dir))
    base = '/' + '/'.join(parts)
    env = dict((key, '%s/%s' % (base, sub)) for key, sub in CACHE_ENV)
    if runtime_kind == 'venv':
        env['TMPDIR'] = '%s/%s' % (base, CACHE_TMP_SUBDIR)
    return env


def serve_env(knobs: Optional[Mapping[str, Any]], runtime_kind: str = 'container', cache_dir: Optional[str] = None) -> Dict[str, str]:
    """The static, non-secret environment of ``vllm serve`` (string values), ``runtime_vllm_env`` merged last.

    With ``cache_dir`` (the node's runtime_cache_dir), the JIT cache paths of ``cache_env()``.

    >>> serve_env({})['NCCL_DEBUG'], serve_env({})['HF_HUB_OFFLINE']
    ('WARN', '1')
    """
    conf = resolve_knobs(knobs, runtime_kind)
    env = dict(STATIC_ENV)
    env.update(KIND_ENV[runtime_kind])
    if cache_dir is not None:
        env.update(cache_env(cache_dir, runtime_kind))
    offline = '1' if conf['hf_hub_offline'] else '0'
    env['HF_HUB_OFFLINE'] = offline
    env['TRANSFORMERS_OFFLINE'] = offline
    for key, value in conf['env'].items():
        if isinstance(value, bool):
            env[_text(key)] = '1' if value else '0'
        else:
            env[_text(key)] = _text(value)
    return env


def topology(cluster: Mapping[str, Any], host: str) -> Dict[str, Any]:
    """A host's place in the cluster: role, node_rank, nnodes, master_addr, head and the hosts in rank order.

    ``cluster`` is the topology the preflight derives once (the fact ``preflight_topology``,
    ``plugins/module_utils/topology.py``): the head is rank 0, the workers 1..N in the order of their group, and
    master_addr is the head's address on the link this host reaches it over.

    >>> topology({'head': 'h', 'hosts': ['h', 'w'], 'nnodes': 2,
    ...           'nodes': {'h': {'rank': 0, 'role': 'head', 'master_addr': '192.168.100.1'},
    ...                     'w': {'rank': 1, 'role': 'worker', 'master_addr': '192.168.100.1'}}}, 'w')['node_rank']
    1
    """
    if not isinstance(cluster, Mapping) or not isinstance(cluster.get('nodes'), Mapping):
        raise VllmConfigError('%s: preflight_topology is %s, expected the topology the preflight play derives '
                              '(dgxspark.cluster.cluster_topology)' % (host, _found(cluster)))
    node = cluster['nodes'].get(host)
    if not isinstance(node, Mapping):
        raise VllmConfigError('%s: is not a node of preflight_topology (%s), expected a serving node of the head or the '
                              'worker group' % (host, ', '.join(cluster.get('hosts') or []) or 'none'))
    addr = node.get('master_addr')
    try:
        ipaddress.ip_address(_text(addr))
    except ValueError:
        raise VllmConfigError('%s: preflight_topology.nodes[%s].master_addr is %s, expected the head\'s fabric IPv4 address '
                              '(the vLLM rendezvous, --master-addr)' % (host, host, _found(addr)))
    return {'role': node.get('role'), 'node_rank': node.get('rank'), 'nnodes': cluster.get('nnodes'),
            'master_addr': _text(addr), 'head': cluster.get('head'), 'hosts': list(cluster.get('hosts') or [])}
