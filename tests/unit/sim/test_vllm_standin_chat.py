"""The vLLM stand-in's chat rendering (sim/vllm-standin/src/vllm/chat_template.py): the tokenizer mode and the Jinja
template as vLLM 0.27.1 resolves them, and the HTTP 400 a chat request gets when no template renders it.

Source: vLLM 0.27.1 (vllm/config/model.py, vllm/renderers/registry.py, vllm/renderers/hf.py); see sim/SOURCES.md
"## vLLM stand-in: flags and chat"."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_cmd import serve_argv

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / 'sim' / 'vllm-standin' / 'src'))

from vllm import chat_template  # noqa: E402  (the stand-in)

from test_vllm_standin import MODEL, SHA, SERVED, Proc, free_port, request, wait_ready  # noqa: E402

ARCH = 'DeepseekV4ForCausalLM'


def make_snapshot(root: Path, architecture: Optional[str] = ARCH, tokenizer_config: Optional[Dict[str, Any]] = None,
                  jinja: bool = False) -> Path:
    """An HF cache (root/hub) with the 0731 snapshot: config.json, tokenizer.json, no template (as DeepSeek ships it)."""
    repo = root / 'hub' / ('models--' + MODEL.replace('/', '--'))
    snap = repo / 'snapshots' / SHA
    snap.mkdir(parents=True)
    (snap / 'config.json').write_text(json.dumps({'architectures': [architecture] if architecture else [],
                                                  'model_type': 'deepseek_v4'}))
    (snap / 'tokenizer.json').write_text('{}')
    if tokenizer_config is not None:
        (snap / 'tokenizer_config.json').write_text(json.dumps(tokenizer_config))
    if jinja:
        (snap / 'chat_template.jinja').write_text('{{ messages }}')
    (repo / 'refs').mkdir()
    (repo / 'refs' / 'main').write_text(SHA)
    return snap


@pytest.mark.parametrize('mode,architecture,tokenizer_config,jinja,given,expected_mode,fails', [
    ('deepseek_v4', ARCH, None, False, None, 'deepseek_v4', False),          # the collection's flag, both kinds
    ('auto', ARCH, None, False, None, 'deepseek_v4', False),                 # vLLM 0.27.1 picks it by architecture
    ('auto', 'LlamaForCausalLM', None, False, None, 'auto', True),           # no DeepSeek V4 architecture: HF, no template
    ('hf', ARCH, None, False, None, 'hf', True),                             # the HF tokenizer: DeepSeek ships no template
    ('slow', ARCH, {'model_max_length': 1}, False, None, 'slow', True),      # a tokenizer_config.json without one
    ('hf', ARCH, {'chat_template': '{{ x }}'}, False, None, 'hf', False),    # a template in tokenizer_config.json
    ('hf', ARCH, None, True, None, 'hf', False),                             # chat_template.jinja beside the tokenizer
    ('hf', ARCH, None, False, '/etc/template.jinja', 'hf', False),           # --chat-template
    ('deepseek_v32', ARCH, None, False, None, 'deepseek_v32', False),        # another mode with its own encoder
], ids=['deepseek_v4', 'auto-dsv4-arch', 'auto-other-arch', 'hf', 'slow-config-without-template', 'hf-config-template',
        'hf-jinja-file', 'hf-chat-template-flag', 'deepseek_v32'])
def test_chat_problem(tmp_path, mode, architecture, tokenizer_config, jinja, given, expected_mode, fails):
    make_snapshot(tmp_path, architecture, tokenizer_config, jinja)
    resolved, problem = chat_template.chat_problem(mode, given, MODEL, None, None, {'HF_HOME': str(tmp_path)})
    assert resolved == expected_mode
    assert (problem == chat_template.NO_TEMPLATE_MESSAGE) if fails else problem is None


def test_model_not_in_the_cache_is_the_worst_case(tmp_path):
    """No config.json to read: the architecture is unknown, so "auto" stays the HF tokenizer without a template."""
    env = {'HF_HOME': str(tmp_path)}
    assert chat_template.chat_problem('auto', None, MODEL, SHA, None, env) == ('auto', chat_template.NO_TEMPLATE_MESSAGE)
    assert chat_template.chat_problem('deepseek_v4', None, MODEL, SHA, None, env) == ('deepseek_v4', None)


def _serve_pair(tmp: Path, mode: Optional[str]) -> tuple:
    """A head and a worker from the collection's own argv (venv kind), tokenizer_mode overridden when given."""
    port, master = free_port(), free_port()
    knobs = {'runtime_vllm_host': '127.0.0.1', 'runtime_vllm_port': port, 'runtime_vllm_master_port': master,
             'runtime_vllm_revision': SHA}
    if mode is not None:
        knobs['runtime_vllm_tokenizer_mode'] = mode
    env = {'HF_HUB_OFFLINE': '1', 'HF_HOME': str(tmp / 'hf')}
    command = [sys.executable, '-m', 'vllm', 'serve']
    argvs = {role: serve_argv(knobs, role, rank, 2, '127.0.0.1', command=command, runtime_kind='venv')
             for role, rank in (('worker', 1), ('head', 0))}
    procs = [Proc(tmp, '%s-%s' % (role, mode or 'profile'), argvs[role], env) for role in ('worker', 'head')]
    wait_ready(port, procs, timeout=20)
    return procs, port, argvs['head']


CHAT = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'ping'}], 'max_tokens': 1}


def test_venv_profile_serves_chat(tmp_path):
    """The venv kind's argv carries --tokenizer-mode deepseek_v4: a 1-token chat completion answers."""
    make_snapshot(tmp_path / 'hf')
    procs, port, args = _serve_pair(tmp_path, None)
    try:
        assert args[args.index('--tokenizer-mode') + 1] == 'deepseek_v4'
        status, body = request(port, '/v1/chat/completions', CHAT)
        assert status == 200, body
        assert json.loads(body)['usage']['completion_tokens'] == 1
    finally:
        for proc in procs:
            proc.stop()


def test_hf_tokenizer_mode_fails_chat_but_not_completions(tmp_path):
    """--tokenizer-mode hf on a checkpoint without a Jinja template: chat gets vLLM's 400, completions still answer."""
    make_snapshot(tmp_path / 'hf')
    procs, port, args = _serve_pair(tmp_path, 'hf')
    try:
        assert args[args.index('--tokenizer-mode') + 1] == 'hf'
        status, body = request(port, '/v1/chat/completions', CHAT)
        assert status == 400, body
        assert json.loads(body) == {'error': {'message': chat_template.NO_TEMPLATE_MESSAGE, 'type': 'BadRequestError',
                                              'param': None, 'code': 400}}
        status, body = request(port, '/v1/completions', {'model': SERVED, 'prompt': 'ping', 'max_tokens': 1})
        assert status == 200, body
    finally:
        for proc in procs:
            proc.stop()
