#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_validate
short_description: Run seed 000's correctness guards against the serving vLLM API on loopback
version_added: 0.1.0
description:
  - Runs on the head against the OpenAI-compatible API (O(base_url), loopback) the guards of
    docs/validation.md, each to a PASS or FAIL verdict with its evidence. A failing guard does
    not stop the others; the module itself fails only when it cannot reach the API at all.
  - The API key is read from O(api_key_file) (C(VLLM_API_KEY=...)), never taken as a parameter.
  - Sends requests only; changes nothing on the node.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  base_url:
    description: The API's base URL on the head.
    type: str
    default: http://127.0.0.1:8888
  api_key_file:
    description: EnvironmentFile-style file with C(VLLM_API_KEY); absent or without the key means no key.
    type: path
    default: /etc/dgxspark/vllm-secret.env
  model:
    description: The served model name.
    type: str
    required: true
  max_model_len:
    description: The max_model_len C(/v1/models) must report (0 = not checked).
    type: int
    default: 0
  guards:
    description: The guards to run, in this order.
    type: list
    elements: str
    default: [warmup, smoke, blocks, margin, needles, acceptance, decode_rate, finish_reason]
    choices: [warmup, smoke, blocks, margin, needles, acceptance, decode_rate, finish_reason]
  warmup_tolerance:
    description: Relative agreement of two consecutive warm-up passes.
    type: float
    default: 0.05
  warmup_max_rounds:
    description: Warm-up passes at most.
    type: int
    default: 8
  blocks_concurrency:
    description: Documents prefilled together in guard 4 (at least 3).
    type: int
    default: 8
  blocks_shared:
    description: Blocks of the shared prefix.
    type: int
    default: 2
  blocks_own:
    description: Blocks of each document after the shared prefix.
    type: int
    default: 2
  block_tokens:
    description: Tokens per block (the KV block size).
    type: int
    default: 256
  margin_min_logprob:
    description: The top logprob of the margin probe's first token must be at least this.
    type: float
    default: -0.1
  margin_rounds:
    description: Rounds of the margin probe (alone and beside a neighbour each).
    type: int
    default: 2
  margin_warm_seconds:
    description: Seconds between rounds (the warm period).
    type: float
    default: 0
  needle_ladder:
    description: Rungs of the needle ladder, each C({needles, tokens}).
    type: list
    elements: dict
    default: [{needles: 1, tokens: 2048}, {needles: 2, tokens: 8192}, {needles: 3, tokens: 16384}]
  acceptance_floors:
    description: Floors of the acceptance canary, C({code, prose}) each C({acceptance, tokens_per_step}).
    type: dict
    default: {code: {acceptance: 0.75, tokens_per_step: 3.0}, prose: {acceptance: 0.45, tokens_per_step: 2.2}}
  acceptance_max_tokens:
    description: Tokens generated per canary prompt.
    type: int
    default: 256
  decode_floor_tok_s:
    description: Single-stream decode tok/s must be at least this (seed 004 measured 62-83).
    type: float
    default: 50
  decode_tokens:
    description: Tokens generated for the decode-rate guard.
    type: int
    default: 128
  finish_max_tokens:
    description: The max_tokens that cuts the tool call off.
    type: int
    default: 8
  timeout:
    description: Seconds per request.
    type: float
    default: 600
"""

EXAMPLES = r"""
- name: Run the quick guards
  dgxspark.cluster.vllm_validate:
    model: deepseek-v4-flash-0731
    max_model_len: 1048576
  register: guards
"""

RETURN = r"""
verdicts:
  description: One per guard, in order - C(guard), C(passed), C(evidence), C(data).
  type: list
  elements: dict
  returned: always
lines:
  description: "C(PASS|FAIL guard: evidence), one per guard."
  type: list
  elements: str
  returned: always
failed_guards:
  description: Names of the guards that failed.
  type: list
  elements: str
  returned: always
"""

import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import guards as g
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_api import ApiError, Client, read_api_key, together


def guard_warmup(client, p):
    times = []
    body = g.chat_body(p['model'], 'Say hello in five words.', 32, ignore_eos=True)
    for dummy in range(max(p['warmup_max_rounds'], 2)):
        times.append(round(client.timed_chat(body)[1], 4))
        if g.warmed_up(times, p['warmup_tolerance']):
            break
    return g.warmup_verdict(times, p['warmup_tolerance'])


def guard_smoke(client, p):
    models = client.get_json('/v1/models')
    chat = client.chat(g.chat_body(p['model'], 'Name the largest planet of the solar system in one sentence.', 48))
    thinking = client.chat(dict(g.chat_body(p['model'], 'What is 17 + 25?', 512),
                                chat_template_kwargs={'thinking': True, 'reasoning_effort': 'low'}))
    return g.smoke_verdict(models, chat, thinking, p['model'], p['max_model_len'])


def guard_blocks(client, p):
    n = max(p['blocks_concurrency'], 3)
    docs = g.block_documents(n, p['blocks_shared'], p['blocks_own'], p['block_tokens'])
    max_tokens = 16 * (p['blocks_shared'] + p['blocks_own']) + 32

    def ask(doc):
        return lambda: client.chat(g.chat_body(p['model'], doc['content'], max_tokens))

    runs = []
    for doc in docs:
        runs.append({'mode': 'alone', 'doc': doc['name'], 'expected': doc['expected'],
                     'answer': g.message_of(ask(doc)())[0].get('content')})
    for doc, out in zip(docs, together([ask(doc) for doc in docs])):
        if isinstance(out, Exception):
            raise out
        runs.append({'mode': '%d-way' % n, 'doc': doc['name'], 'expected': doc['expected'],
                     'answer': g.message_of(out)[0].get('content')})
    return g.blocks_verdict(runs)


def guard_margin(client, p):
    probe = g.chat_body(p['model'], g.MARGIN_QUESTION, 4, logprobs=True, top_logprobs=5)
    neighbour = g.chat_body(p['model'], g.PROSE_PROMPT, 128, ignore_eos=True)
    rounds = []
    for i in range(max(p['margin_rounds'], 1)):
        if i:
            time.sleep(p['margin_warm_seconds'])
        alone = client.chat(probe)
        started = threading.Event()
        result = {}

        def run_neighbour():
            try:
                result['out'] = client.stream(neighbour, on_first=started.set)
            except ApiError as exc:
                result['error'] = exc
            finally:
                started.set()
        thread = threading.Thread(target=run_neighbour)
        thread.start()
        started.wait(p['timeout'])
        beside = client.chat(probe)
        thread.join()
        if 'error' in result:
            raise result['error']
        rounds.append({'alone': alone, 'neighbour': beside})
    return g.margin_verdict(rounds, p['margin_min_logprob'])


def guard_needles(client, p):
    runs = []
    for rung in p['needle_ladder']:
        content, expected = g.needle_prompt(int(rung['needles']), int(rung['tokens']))
        out = client.chat(g.chat_body(p['model'], content, 16 * len(expected) + 32))
        runs.append({'needles': int(rung['needles']), 'tokens': int(rung['tokens']), 'expected': expected,
                     'prompt_tokens': (out.get('usage') or {}).get('prompt_tokens'),
                     'answer': g.message_of(out)[0].get('content')})
    return g.needles_verdict(runs)


def guard_acceptance(client, p):
    readings = {}
    for kind, prompt in (('code', g.CODE_PROMPT), ('prose', g.PROSE_PROMPT)):
        before = g.parse_metrics(client.get_text('/metrics'))
        client.chat(g.chat_body(p['model'], prompt, p['acceptance_max_tokens'], ignore_eos=True))
        after = g.parse_metrics(client.get_text('/metrics'))
        readings[kind] = (before, after)
    return g.acceptance_verdict(readings, p['acceptance_floors'])


def guard_decode_rate(client, p):
    result = client.stream(g.chat_body(p['model'], g.PROSE_PROMPT, p['decode_tokens'], ignore_eos=True))
    return g.decode_verdict(result, p['decode_floor_tok_s'])


def guard_finish_reason(client, p):
    body = g.chat_body(p['model'], g.TOOL_QUESTION, p['finish_max_tokens'], tools=[g.TOOL], tool_choice='auto')
    return g.finish_reason_verdict(client.chat(body), p['finish_max_tokens'])


GUARDS = {'warmup': ('warm-up', guard_warmup), 'smoke': ('smoke', guard_smoke), 'blocks': ('guard4-kv-blocks', guard_blocks),
          'margin': ('guard5-margin', guard_margin), 'needles': ('needle-ladder', guard_needles),
          'acceptance': ('acceptance-canary', guard_acceptance), 'decode_rate': ('decode-rate', guard_decode_rate),
          'finish_reason': ('finish-reason', guard_finish_reason)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type='str', default='http://127.0.0.1:8888'),
            api_key_file=dict(type='path', default='/etc/dgxspark/vllm-secret.env'),
            model=dict(type='str', required=True),
            max_model_len=dict(type='int', default=0),
            guards=dict(type='list', elements='str', default=list(GUARDS), choices=list(GUARDS)),
            warmup_tolerance=dict(type='float', default=0.05),
            warmup_max_rounds=dict(type='int', default=8),
            blocks_concurrency=dict(type='int', default=8),
            blocks_shared=dict(type='int', default=2),
            blocks_own=dict(type='int', default=2),
            block_tokens=dict(type='int', default=256, no_log=False),
            margin_min_logprob=dict(type='float', default=-0.1),
            margin_rounds=dict(type='int', default=2),
            margin_warm_seconds=dict(type='float', default=0),
            needle_ladder=dict(type='list', elements='dict',
                               default=[{'needles': 1, 'tokens': 2048}, {'needles': 2, 'tokens': 8192}, {'needles': 3, 'tokens': 16384}]),
            acceptance_floors=dict(type='dict', default={'code': {'acceptance': 0.75, 'tokens_per_step': 3.0},
                                                         'prose': {'acceptance': 0.45, 'tokens_per_step': 2.2}}),
            acceptance_max_tokens=dict(type='int', default=256, no_log=False),
            decode_floor_tok_s=dict(type='float', default=50),
            decode_tokens=dict(type='int', default=128, no_log=False),
            finish_max_tokens=dict(type='int', default=8, no_log=False),
            timeout=dict(type='float', default=600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for rung in p['needle_ladder']:
        if not isinstance(rung, dict) or not all(isinstance(rung.get(k), int) and rung.get(k) > 0 for k in ('needles', 'tokens')):
            module.fail_json(msg='needle_ladder has %r, expected {needles: N, tokens: T} with positive integers' % (rung,))
    client = Client(p['base_url'], read_api_key(p['api_key_file']), p['timeout'])
    try:
        client.get_json('/v1/models')
    except ApiError as exc:
        module.fail_json(msg='the vLLM API at %s does not answer: %s' % (p['base_url'], exc))
    verdicts = []
    for name in p['guards']:
        label, run = GUARDS[name]
        try:
            verdicts.append(run(client, p))
        except (ApiError, ValueError, KeyError, TypeError) as exc:
            verdicts.append(g.verdict(label, False, 'the guard could not run: %s' % exc))
    module.exit_json(changed=False, verdicts=verdicts, lines=g.report_lines(verdicts), failed_guards=g.failed(verdicts))


if __name__ == '__main__':
    main()
