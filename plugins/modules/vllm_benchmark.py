#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Seed 004's sweep of prompt lengths and concurrency against the serving vLLM API on loopback
version_added: 0.1.0
description:
  - For each prompt length and concurrency, O(repeats) rounds of that many streamed chats at once
    (C(stream_options.include_usage)) - TTFT, prefill tok/s, decode tok/s =
    (completion_tokens - 1) / (t_last_token - t_first_token) from the usage (tokens, not SSE frames),
    aggregate tok/s (the streams' decode tok/s summed) and the draft acceptance from the
    C(/metrics) deltas; medians with their spread (plugins/module_utils/bench_stats.py).
  - Each prompt starts with a fresh nonce, so no round reads another's prefix cache.
  - The API key is read from O(api_key_file), never taken as a parameter. Sends requests only.
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
    description: EnvironmentFile-style file with C(VLLM_API_KEY).
    type: path
    default: /etc/dgxspark/vllm-secret.env
  model:
    description: The served model name.
    type: str
    required: true
  prompt_lengths:
    description: Prompt lengths in tokens.
    type: list
    elements: int
    default: [256, 4096, 32768]
  concurrency:
    description: Concurrency levels.
    type: list
    elements: int
    default: [1, 6]
  repeats:
    description: Rounds per cell (the median is over these).
    type: int
    default: 3
  max_tokens:
    description: Tokens generated per stream (ignore_eos).
    type: int
    default: 256
  timeout:
    description: Seconds per request.
    type: float
    default: 1800
"""

EXAMPLES = r"""
- name: Run the sweep
  dgxspark.cluster.vllm_benchmark:
    model: deepseek-v4-flash-0731
  register: bench
"""

RETURN = r"""
benchmark:
  description:
    - C(meta) (vLLM version from C(/version), the serving checkpoint revision from the running
      C(vllm serve) command line, date, settings) and C(cells), one per prompt length and concurrency.
  type: dict
  returned: always
"""

import functools
import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import bench_stats as bs
from ansible_collections.dgxspark.cluster.plugins.module_utils import guards as g
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_api import ApiError, Client, read_api_key, together


def prompt(n_tokens):
    head = 'Run %s. Continue the following text in the same style.\n' % uuid.uuid4().hex[:12]
    return head + g.filler(max(n_tokens - g.count_tokens(head), 8))


def serving_revision(proc='/proc'):
    """The --revision of the running ``vllm serve`` (its command line in /proc), "" when none is found."""
    try:
        pids = [d for d in os.listdir(proc) if d.isdigit()]
    except OSError:
        return ''
    for pid in pids:
        try:
            with open(os.path.join(proc, pid, 'cmdline'), 'rb') as handle:
                argv = handle.read().decode('utf-8', 'replace').split('\0')
        except (IOError, OSError):
            continue
        if 'serve' in argv and '--revision' in argv:
            idx = argv.index('--revision')
            if idx + 1 < len(argv):
                return argv[idx + 1]
    return ''


def run(client, p):
    version = ''
    try:
        version = str(client.get_json('/version').get('version') or '')
    except (ApiError, ValueError, AttributeError):
        version = ''
    cells = []
    for length in p['prompt_lengths']:
        for conc in p['concurrency']:
            repeats = []
            for dummy in range(max(p['repeats'], 1)):
                before = g.parse_metrics(client.get_text('/metrics'))
                bodies = [g.chat_body(p['model'], prompt(length), p['max_tokens'], ignore_eos=True) for dummy in range(conc)]
                streams = together([functools.partial(client.stream, b) for b in bodies])
                for out in streams:
                    if isinstance(out, Exception):
                        raise out
                after = g.parse_metrics(client.get_text('/metrics'))
                rate, per_step, _drafts = g.acceptance(before, after)
                repeats.append({'streams': streams, 'acceptance': rate, 'tokens_per_step': per_step})
            cells.append(bs.cell(length, conc, repeats))
    return {'meta': {'version': version, 'revision': serving_revision(), 'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                     'prompt_lengths': p['prompt_lengths'], 'concurrency': p['concurrency'], 'repeats': p['repeats'],
                     'max_tokens': p['max_tokens'], 'model': p['model']},
            'cells': cells}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type='str', default='http://127.0.0.1:8888'),
            api_key_file=dict(type='path', default='/etc/dgxspark/vllm-secret.env'),
            model=dict(type='str', required=True),
            prompt_lengths=dict(type='list', elements='int', default=[256, 4096, 32768]),
            concurrency=dict(type='list', elements='int', default=[1, 6]),
            repeats=dict(type='int', default=3),
            max_tokens=dict(type='int', default=256, no_log=False),
            timeout=dict(type='float', default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ('prompt_lengths', 'concurrency'):
        if not p[name] or any(v < 1 for v in p[name]):
            module.fail_json(msg='%s is %r, expected a non-empty list of positive integers' % (name, p[name]))
    if p['max_tokens'] < 2:
        module.fail_json(msg='max_tokens is %d, expected at least 2 (decode tok/s needs two tokens)' % p['max_tokens'])
    client = Client(p['base_url'], read_api_key(p['api_key_file']), p['timeout'])
    try:
        results = run(client, p)
    except ApiError as exc:
        module.fail_json(msg='the benchmark against %s failed: %s' % (p['base_url'], exc))
    module.exit_json(changed=False, benchmark=results)


if __name__ == '__main__':
    main()
