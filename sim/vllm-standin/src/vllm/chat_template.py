"""Whether ``/v1/chat/completions`` can render a prompt: the tokenizer mode and the chat template, as vLLM 0.27.1 resolves them.

Sources (vLLM 0.27.1, the PyPI wheel ``vllm-0.27.1-cp38-abi3-manylinux_2_28_x86_64.whl``, commit g6e448d0ea):

* ``vllm/config/model.py``: ``--tokenizer-mode`` is ``TokenizerMode | str`` (any string passes argparse; "auto" by
  default). With "auto", the resolved architecture picks the mode: ``DeepseekV4ForCausalLM`` -> "deepseek_v4",
  ``DeepseekV32ForCausalLM`` -> "deepseek_v32", ``KimiK3ForConditionalGeneration`` -> "kimi_k3", the Inkling
  architectures -> "inkling" (logged as ``Defaulting to tokenizer_mode=%r for %s``); anything else stays "auto" (the HF
  tokenizer).
* ``vllm/renderers/registry.py``: the deepseek_v4, deepseek_v32, kimi_k3, mistral, cohere and inkling modes render with
  their own Python encoders (``vllm/tokenizers/deepseek_v4.py`` wraps ``apply_chat_template`` around
  ``deepseek_v4_encoding.encode_messages``); every other mode renders with the HF tokenizer's Jinja template.
* ``vllm/renderers/hf.py`` ``resolve_chat_template``: ``--chat-template`` first, then the processor's and the
  tokenizer's template (``tokenizer_config.json`` ``chat_template``, or ``chat_template.jinja`` /
  ``chat_template.json`` beside it), then a per-model-type fallback (none for deepseek_v4); with none,
  ``safe_apply_chat_template`` raises ``ChatTemplateResolutionError`` (a ValueError) with the message below, which
  ``vllm/entrypoints/serve/utils/error_response.py`` turns into HTTP 400 ``BadRequestError``.

DeepSeek's V4 repositories ship no Jinja template (the DSpark recipe, docs/DEEPSEEK_V4_FLASH_0731.md @ 489af95: "The
model card does not ship a Jinja chat template"), so chat needs the deepseek_v4 mode. When the stand-in cannot read the
model's config.json (not in the cache, online), the architecture is unknown: the worst case, chat fails unless the mode
itself renders without a template.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

from vllm import checks, log

NO_TEMPLATE_MESSAGE = ('As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat '
                       'template if the tokenizer does not define one.')
# Modes whose renderer has its own encoder (vllm/renderers/registry.py, _VLLM_RENDERERS less hf/kimi_audio/terratorch).
ENCODER_MODES = ('deepseek_v4', 'deepseek_v32', 'kimi_k3', 'mistral', 'cohere', 'inkling')
# "auto" -> mode by architecture (vllm/config/model.py, ModelConfig.__post_init__).
AUTO_MODES = {
    'DeepseekV4ForCausalLM': 'deepseek_v4',
    'DeepseekV32ForCausalLM': 'deepseek_v32',
    'KimiK3ForConditionalGeneration': 'kimi_k3',
    'InklingForCausalLM': 'inkling',
    'InklingForConditionalGeneration': 'inkling',
}
_SHA_RE = re.compile(r'^[0-9a-f]{40}$')


def model_dir(model: str, revision: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """The checkpoint directory vLLM would read (a local path, or the HF cache snapshot), or None."""
    if checks.is_path(model):
        path = os.path.expanduser(model)
        return path if os.path.isdir(path) else None
    repo_dir = os.path.join(checks.hub_cache(env), 'models--' + model.replace('/', '--'))
    commit = revision if revision and _SHA_RE.match(revision) else None
    if commit is None:
        try:
            with open(os.path.join(repo_dir, 'refs', revision or 'main'), encoding='utf-8') as handle:
                commit = handle.read()
        except OSError:
            return None
    snapshot = os.path.join(repo_dir, 'snapshots', commit)
    return snapshot if os.path.isdir(snapshot) else None


def _json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding='utf-8') as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_mode(mode: str, directory: Optional[str]) -> str:
    """The tokenizer mode vLLM ends up with ("auto" picks one by the config's first architecture)."""
    if mode != 'auto' or directory is None:
        return mode
    architectures = _json(os.path.join(directory, 'config.json')).get('architectures') or []
    return AUTO_MODES.get(architectures[0], mode) if isinstance(architectures, list) and architectures else mode


def has_jinja_template(directory: Optional[str], tokenizer_dir: Optional[str] = None) -> bool:
    """The tokenizer (or its processor) defines a chat template."""
    for base in (tokenizer_dir, directory):
        if base is None:
            continue
        if _json(os.path.join(base, 'tokenizer_config.json')).get('chat_template'):
            return True
        for name in ('chat_template.jinja', 'chat_template.json'):
            if os.path.isfile(os.path.join(base, name)):
                return True
    return False


def chat_problem(tokenizer_mode: str, chat_template: Optional[str], model: str, revision: Optional[str],
                 tokenizer: Optional[str], env: Mapping[str, str]) -> Tuple[str, Optional[str]]:
    """The tokenizer mode resolved, and the error every chat request gets (None when chat renders)."""
    directory = model_dir(model, revision, env)
    mode = resolve_mode(tokenizer_mode, directory)
    if mode in ENCODER_MODES or chat_template:
        return mode, None
    tokenizer_dir = model_dir(tokenizer, None, env) if tokenizer else None
    if has_jinja_template(directory, tokenizer_dir):
        return mode, None
    return mode, NO_TEMPLATE_MESSAGE


def startup(args: Any, model: str, env: Mapping[str, str]) -> Optional[str]:
    """At the head's start: log the mode "auto" resolved to (as vLLM does) and return the chat error, if any."""
    mode, problem = chat_problem(args.tokenizer_mode, args.chat_template, model, args.revision, args.tokenizer, env)
    if mode != args.tokenizer_mode:
        log.info('config', 'Defaulting to tokenizer_mode=%r for %s', mode, model)
    return problem
