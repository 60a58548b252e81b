# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validation guards' logic: prompts they send and verdicts on what comes back (pure, stdlib only).

Seed 000's quiet bugs gave fluent, plausible, wrong answers that only showed under
concurrency and uptime; each guard here is the test shape that caught one of them
(docs/validation.md). The module vllm_validate does the I/O on the head; these
functions build the requests and judge the answers, so they are unit-tested
without a server.

A verdict is ``{"guard": NAME, "passed": bool, "evidence": str, "data": {...}}``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import random
import re

# The one /metrics parser, re-exported for the modules that read it through the guards (vllm_validate, vllm_benchmark).
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_metrics import METRIC_RE, parse_metrics  # noqa: F401 pylint: disable=unused-import

TOKEN_RE = re.compile(r'\s*\w+|\s*[^\w\s]')
ANSWER_LINE_RE = re.compile(r'^\s*(?:block\s+)?([A-Za-z0-9-]+)\s*[:=)\-]\s*([A-Za-z0-9-]+)\s*$', re.I | re.M)
CODE_ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789'
FILLER = ('The quiet river runs past the old mill while the baker opens the shop at dawn and the town slowly wakes. '
          'Clouds drift over the hills, a cart rolls down the lane, and somebody hums a tune near the well. ')
MARKER_QUESTION = ("List every block marker in the document above, one per line as '<block number>: <marker>', "
                   "in block order and nothing else.")
NEEDLE_QUESTION = ("What are the pass codes given in the text above? Answer one per line as '<name>: <pass code>' "
                   "and nothing else.")
MARGIN_QUESTION = 'Answer with one word: what is the capital of France?'
CODE_PROMPT = ('Write a Python function that parses an nginx access log line into a dict with the client address, '
               'time, request, status and size; include type hints and a docstring. Only the code.')
PROSE_PROMPT = ('Write a short story about a lighthouse keeper who finds a message in a bottle on a stormy night. '
                'Plain prose, no lists.')
TOOL = {'type': 'function', 'function': {
    'name': 'get_weather', 'description': 'Current weather for a city.',
    'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}, 'unit': {'type': 'string'}},
                   'required': ['city']}}}
TOOL_QUESTION = 'Call get_weather for Paris in celsius, then say nothing else.'


def count_tokens(text):
    """An estimate of a text's tokens (words and punctuation), what the stand-in counts.

    >>> count_tokens('BLOCK 3 MARKER: AB12')
    5
    """
    return len(TOKEN_RE.findall(text or ''))


def filler(n_tokens, offset=0):
    """Plain prose of about ``n_tokens`` tokens (no markers, no pass codes)."""
    words = TOKEN_RE.findall(FILLER)
    return ''.join(words[(offset + i) % len(words)] for i in range(max(n_tokens, 0))).strip()


def code(rng, length=6):
    return ''.join(rng.choice(CODE_ALPHABET) for dummy in range(length))


def chat_body(model, content, max_tokens, **extra):
    """A temperature-0 chat request with thinking off (the served default may be on)."""
    body = {'model': model, 'messages': [{'role': 'user', 'content': content}], 'temperature': 0,
            'max_tokens': max_tokens, 'chat_template_kwargs': {'thinking': False}}
    body.update(extra)
    return body


# --------------------------------------------------------------------------- warm-up (seed 003)
def warmed_up(times, tolerance, slack=0.01):
    """True when the last two times agree within ``tolerance`` (relative) or ``slack`` seconds.

    >>> warmed_up([3.0, 1.02, 1.0], 0.05)
    True
    >>> warmed_up([3.0, 1.5], 0.05)
    False
    """
    if len(times) < 2:
        return False
    a, b = times[-2], times[-1]
    return abs(a - b) <= max(tolerance * max(a, b), slack)


def warmup_verdict(times, tolerance):
    ok = warmed_up(times, tolerance)
    shown = ', '.join('%.3f' % t for t in times)
    if ok:
        return verdict('warm-up', True, '%d passes until two agreed within %.0f%%: %s s' % (len(times), tolerance * 100, shown),
                       {'times': times})
    return verdict('warm-up', False, 'no two consecutive passes agreed within %.0f%% after %d: %s s'
                   % (tolerance * 100, len(times), shown), {'times': times})


def verdict(guard, passed, evidence, data=None):
    return {'guard': guard, 'passed': bool(passed), 'evidence': evidence, 'data': data or {}}


# --------------------------------------------------------------------------- smoke
def models_problem(payload, served, max_model_len):
    """What is wrong with a /v1/models answer, or None."""
    data = payload.get('data') if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return '/v1/models answered %r, expected {"data": [...]}' % (str(payload)[:120],)
    names = [m.get('id') for m in data if isinstance(m, dict)]
    if served not in names:
        return '/v1/models lists %s, expected %s' % (names, served)
    entry = [m for m in data if isinstance(m, dict) and m.get('id') == served][0]
    if max_model_len and entry.get('max_model_len') != max_model_len:
        return '%s has max_model_len %r, expected %d' % (served, entry.get('max_model_len'), max_model_len)
    return None


def message_of(payload):
    """(message dict, finish_reason) of a chat completion; ({}, None) when it has none."""
    choices = payload.get('choices') if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return {}, None
    return choices[0].get('message') or {}, choices[0].get('finish_reason')


def smoke_verdict(models, chat, thinking, served, max_model_len):
    problems = []
    problem = models_problem(models, served, max_model_len)
    if problem:
        problems.append(problem)
    message, finish = message_of(chat)
    if not (message.get('content') or '').strip():
        problems.append('the temperature-0 chat answered no content (finish_reason %r)' % (finish,))
    t_message, _t_finish = message_of(thinking)
    reasoning = t_message.get('reasoning') or t_message.get('reasoning_content')
    if not (reasoning or '').strip():
        problems.append('with thinking on, the reply has no reasoning field (keys: %s)' % sorted(t_message))
    if problems:
        return verdict('smoke', False, '; '.join(problems))
    return verdict('smoke', True, '%s listed with max_model_len %s; chat answered %r; thinking gave %d chars of reasoning'
                   % (served, max_model_len, (message.get('content') or '')[:40], len(reasoning)))


# --------------------------------------------------------------------------- guard 4 (seed 000 #12)
def block_documents(n_docs, shared_blocks, own_blocks, block_tokens=256, seed='guard4'):
    """Documents over a shared prefix, each 256-token block opening with ``BLOCK <n> MARKER: <code>``.

    Returns [{'name', 'content', 'expected': [(block, code), ...]}]: the first
    ``shared_blocks`` blocks are the same in every document (the prefix cache shares
    them), the next ``own_blocks`` differ.
    """
    rng = random.Random(seed)
    shared = [(str(b), code(rng)) for b in range(shared_blocks)]
    docs = []
    for d in range(n_docs):
        own = [(str(shared_blocks + b), code(rng)) for b in range(own_blocks)]
        blocks = shared + own
        parts = []
        for i, (label, mark) in enumerate(blocks):
            head = 'BLOCK %s MARKER: %s\n' % (label, mark)
            parts.append(head + filler(block_tokens - count_tokens(head), offset=i * 7) + '\n')
        docs.append({'name': 'doc%d' % d, 'content': ''.join(parts) + '\n' + MARKER_QUESTION, 'expected': blocks})
    return docs


def parse_pairs(text):
    """{label: code} from answer lines ``<label>: <code>``.

    >>> parse_pairs('0: AB12\\nblock 1 - CD34\\nnoise')
    {'0': 'AB12', '1': 'CD34'}
    """
    return {m.group(1): m.group(2) for m in ANSWER_LINE_RE.finditer(text or '')}


def read_back(expected, answer):
    """Blocks whose marker came back wrong or not at all: [(label, expected, got or None)]."""
    got = parse_pairs(answer)
    return [(label, want, got.get(label)) for label, want in expected if got.get(label) != want]


def blocks_verdict(runs):
    """Guard 4 over runs ``[{'mode': 'alone'|'8-way', 'doc': name, 'expected': [...], 'answer': str}]``."""
    per_mode = {}
    bad_names = []
    for run in runs:
        mode = per_mode.setdefault(run['mode'], {'blocks': 0, 'corrupt': 0})
        bad = read_back(run['expected'], run.get('answer'))
        mode['blocks'] += len(run['expected'])
        mode['corrupt'] += len(bad)
        for label, want, got in bad:
            bad_names.append('%s %s block %s (expected %s, got %s)' % (run['mode'], run['doc'], label, want, got or 'nothing'))
    summary = ', '.join('%s: %d of %d blocks corrupt' % (m, v['corrupt'], v['blocks']) for m, v in per_mode.items())
    if bad_names:
        shown = '; '.join(bad_names[:12]) + ('; ... %d more' % (len(bad_names) - 12) if len(bad_names) > 12 else '')
        return verdict('guard4-kv-blocks', False, '%s: %s' % (summary, shown), {'modes': per_mode, 'corrupt': bad_names})
    return verdict('guard4-kv-blocks', True, summary, {'modes': per_mode})


# --------------------------------------------------------------------------- guard 5 (seed 000 #13)
def first_token(payload):
    """(token, logprob, [(token, logprob) of the top candidates]) of a chat reply's first generated token."""
    choices = payload.get('choices') if isinstance(payload, dict) else None
    try:
        row = choices[0]['logprobs']['content'][0]
    except (TypeError, KeyError, IndexError):
        return None, None, []
    top = [(c.get('token'), c.get('logprob')) for c in row.get('top_logprobs') or [] if isinstance(c, dict)]
    return row.get('token'), row.get('logprob'), top


def margin_verdict(rounds, min_logprob):
    """Guard 5 over rounds ``[{'alone': payload, 'neighbour': payload}]`` (one per warm period).

    Passes when every first token's top logprob is >= ``min_logprob`` and the argmax is
    the same alone, beside a neighbour and in every round.
    """
    problems, seen, shown = [], set(), []
    for i, rnd in enumerate(rounds):
        for mode in ('alone', 'neighbour'):
            token, logprob, top = first_token(rnd.get(mode))
            if token is None:
                problems.append('round %d %s: no logprobs in the reply' % (i + 1, mode))
                continue
            seen.add(token)
            runner = ('%r %.3f' % (top[1][0], top[1][1])) if len(top) > 1 and top[1][1] is not None else 'none'
            shown.append('round %d %s: %r lp %.3f (runner-up %s)' % (i + 1, mode, token, logprob, runner))
            if logprob is None or logprob < min_logprob:
                problems.append('round %d %s: top logprob %.3f below %.3f (soft logits)' % (i + 1, mode, logprob, min_logprob))
    if len(seen) > 1:
        problems.append('the argmax differs: %s' % sorted(seen))
    data = {'tokens': sorted(seen)}
    if problems:
        return verdict('guard5-margin', False, '; '.join(problems) + ' [' + '; '.join(shown) + ']', data)
    return verdict('guard5-margin', True, '; '.join(shown), data)


# --------------------------------------------------------------------------- needle ladder
def needle_prompt(n_needles, n_tokens, seed='needles'):
    """A haystack of about ``n_tokens`` with ``n_needles`` sentences ``The pass code for <name> is <code>.``
    at even depths; returns (content, expected [(name, code)])."""
    rng = random.Random('%s-%d-%d' % (seed, n_needles, n_tokens))
    names = ['amber', 'birch', 'cobalt', 'dune', 'ember', 'fjord'][:max(n_needles, 0)]
    needles = [(name, code(rng)) for name in names]
    question_tokens = count_tokens(NEEDLE_QUESTION)
    body_tokens = max(n_tokens - question_tokens - 12 * len(needles), 16)
    pieces, step = [], body_tokens // (len(needles) + 1)
    for i, (name, value) in enumerate(needles):
        pieces.append(filler(step, offset=i * 11))
        pieces.append(' The pass code for %s is %s. ' % (name, value))
    pieces.append(filler(body_tokens - step * len(needles), offset=5))
    return ''.join(pieces) + '\n\n' + NEEDLE_QUESTION, needles


def needles_verdict(runs):
    """Needle ladder over ``[{'needles': n, 'tokens': t, 'prompt_tokens': usage, 'expected': [...], 'answer': str}]``."""
    problems, shown = [], []
    for run in runs:
        bad = read_back(run['expected'], run.get('answer'))
        at = run.get('prompt_tokens') or run['tokens']
        shown.append('%d needles at %s tokens: %d of %d found'
                     % (run['needles'], at, len(run['expected']) - len(bad), len(run['expected'])))
        for name, want, got in bad:
            problems.append('%d needles at %s tokens: %s expected %s, got %s'
                            % (run['needles'], run.get('prompt_tokens') or run['tokens'], name, want, got or 'nothing'))
    if problems:
        return verdict('needle-ladder', False, '; '.join(problems), {'rungs': shown})
    return verdict('needle-ladder', True, '; '.join(shown), {'rungs': shown})


# --------------------------------------------------------------------------- acceptance canary (seed 004)
SPEC_COUNTERS = ('vllm:spec_decode_num_drafts_total', 'vllm:spec_decode_num_draft_tokens_total',
                 'vllm:spec_decode_num_accepted_tokens_total')


def acceptance(before, after):
    """(acceptance rate, tokens per step, drafts) from two /metrics readings; (None, None, 0) without drafts."""
    d = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in SPEC_COUNTERS}
    drafts, drafted, accepted = d[SPEC_COUNTERS[0]], d[SPEC_COUNTERS[1]], d[SPEC_COUNTERS[2]]
    if drafts <= 0 or drafted <= 0:
        return None, None, drafts
    return accepted / drafted, 1.0 + accepted / drafts, drafts


def acceptance_verdict(readings, floors):
    """Acceptance canary; ``readings`` {kind: (before, after)}, ``floors`` {kind: {'acceptance', 'tokens_per_step'}}."""
    problems, shown, data = [], [], {}
    for kind in sorted(readings):
        rate, per_step, drafts = acceptance(*readings[kind])
        floor = floors.get(kind) or {}
        if rate is None:
            problems.append('%s: no drafts counted in /metrics (is speculative decoding on?)' % kind)
            continue
        data[kind] = {'acceptance': round(rate, 4), 'tokens_per_step': round(per_step, 3), 'drafts': drafts}
        shown.append('%s acceptance %.3f (floor %.3f), %.2f tokens per step (floor %.2f)'
                     % (kind, rate, floor.get('acceptance', 0), per_step, floor.get('tokens_per_step', 0)))
        if rate < floor.get('acceptance', 0):
            problems.append('%s acceptance %.3f below the floor %.3f' % (kind, rate, floor['acceptance']))
        if per_step < floor.get('tokens_per_step', 0):
            problems.append('%s %.2f tokens per step below the floor %.2f' % (kind, per_step, floor['tokens_per_step']))
    if problems:
        return verdict('acceptance-canary', False, '; '.join(problems) + ' [' + '; '.join(shown) + ']', data)
    return verdict('acceptance-canary', True, '; '.join(shown), data)


# --------------------------------------------------------------------------- finish_reason (seed 004 issue55)
def finish_reason_verdict(payload, max_tokens):
    message, finish = message_of(payload)
    calls = message.get('tool_calls') or []
    broken = []
    for call in calls:
        args = ((call or {}).get('function') or {}).get('arguments')
        try:
            json.loads(args or '')
        except ValueError:
            broken.append(args)
    if finish != 'length':
        return verdict('finish-reason', False, 'a tool call cut off at max_tokens=%d reported finish_reason %r, expected "length"'
                       % (max_tokens, finish), {'finish_reason': finish})
    if broken:
        return verdict('finish-reason', False, 'finish_reason "length" but tool_calls carry unparseable arguments %r' % broken[:2],
                       {'finish_reason': finish})
    return verdict('finish-reason', True, 'a tool call cut off at max_tokens=%d reported finish_reason "length" with %d '
                   'tool_calls' % (max_tokens, len(calls)), {'finish_reason': finish})


# --------------------------------------------------------------------------- decode rate (seed 004)
def decode_rate(result):
    """Decode tok/s of a streamed reply: (completion_tokens - 1) / (t_last_token - t_first_token); None if unknown.

    >>> decode_rate({'usage': {'completion_tokens': 101}, 't_first': 1.0, 't_last': 3.0})
    50.0
    """
    usage = result.get('usage') or {}
    tokens = usage.get('completion_tokens')
    t_first, t_last = result.get('t_first'), result.get('t_last')
    if not tokens or tokens < 2 or t_first is None or t_last is None or t_last <= t_first:
        return None
    return (tokens - 1) / (t_last - t_first)


def decode_verdict(result, floor):
    rate = decode_rate(result)
    if rate is None:
        return verdict('decode-rate', False, 'the stream gave no usable timing (usage %r)' % (result.get('usage'),))
    tokens = result['usage']['completion_tokens']
    text = 'decode %.1f tok/s over %d tokens (floor %.1f)' % (rate, tokens, floor)
    return verdict('decode-rate', rate >= floor, text if rate >= floor else text.replace('decode', 'decode below the floor:', 1),
                   {'decode_tok_s': round(rate, 2)})


def failed(verdicts):
    """Names of the failed guards, in order."""
    return [v['guard'] for v in verdicts if not v['passed']]


def report_lines(verdicts):
    """``PASS guard: evidence`` lines."""
    return ['%s %s: %s' % ('PASS' if v['passed'] else 'FAIL', v['guard'], v['evidence']) for v in verdicts]
