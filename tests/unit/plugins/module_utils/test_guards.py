# -*- coding: utf-8 -*-
"""The guards' verdicts (plugins/module_utils/guards.py) on crafted API answers."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import guards as g


def chat(content='hello', finish='stop', **message):
    return {'choices': [{'message': dict({'role': 'assistant', 'content': content}, **message), 'finish_reason': finish}]}


def probe(token, logprob, runner=('x', -9.0)):
    return {'choices': [{'logprobs': {'content': [{'token': token, 'logprob': logprob, 'top_logprobs': [
        {'token': token, 'logprob': logprob}, {'token': runner[0], 'logprob': runner[1]}]}]}}]}


MODELS = {'data': [{'id': 'srv', 'max_model_len': 1048576}]}


@pytest.mark.parametrize('times, ok', [([2.0, 1.0, 1.03], True), ([2.0, 1.0], False), ([1.0], False),
                                       ([0.004, 0.009], True)], ids=['agree', 'apart', 'one', 'slack'])
def test_warmed_up(times, ok):
    assert g.warmed_up(times, 0.05) is ok
    assert g.warmup_verdict(times, 0.05)['passed'] is ok


def test_smoke_passes_and_names_each_problem():
    thinking = chat('42', reasoning='17 + 25 = 42')
    assert g.smoke_verdict(MODELS, chat(), thinking, 'srv', 1048576)['passed']
    v = g.smoke_verdict({'data': [{'id': 'srv', 'max_model_len': 4096}]}, chat(''), chat('42'), 'srv', 1048576)
    assert not v['passed']
    assert 'max_model_len 4096, expected 1048576' in v['evidence']
    assert 'no content' in v['evidence'] and 'no reasoning field' in v['evidence']
    assert 'lists' in g.smoke_verdict({'data': [{'id': 'other'}]}, chat(), thinking, 'srv', 0)['evidence']


def test_block_documents_share_a_prefix_and_size_blocks():
    docs = g.block_documents(8, 2, 3)
    assert len(docs) == 8
    assert docs[0]['expected'][:2] == docs[7]['expected'][:2]
    assert docs[0]['expected'][2:] != docs[1]['expected'][2:]
    first_block = docs[0]['content'].split('BLOCK 1 MARKER')[0]
    assert 250 <= g.count_tokens(first_block) <= 258
    assert g.MARKER_QUESTION in docs[0]['content']


def test_blocks_verdict_counts_and_names_corrupt_blocks():
    doc = g.block_documents(3, 1, 2)[0]
    good = '\n'.join('%s: %s' % pair for pair in doc['expected'])
    bad = good.replace(doc['expected'][1][1], 'WRONG1')
    runs = [{'mode': 'alone', 'doc': 'doc0', 'expected': doc['expected'], 'answer': good},
            {'mode': '8-way', 'doc': 'doc0', 'expected': doc['expected'], 'answer': bad},
            {'mode': '8-way', 'doc': 'doc1', 'expected': doc['expected'], 'answer': ''}]
    v = g.blocks_verdict(runs)
    assert not v['passed']
    assert 'alone: 0 of 3 blocks corrupt, 8-way: 4 of 6 blocks corrupt' in v['evidence']
    assert '8-way doc0 block 1 (expected %s, got WRONG1)' % doc['expected'][1][1] in v['evidence']
    assert 'doc1 block 0 (expected %s, got nothing)' % doc['expected'][0][1] in v['evidence']
    assert g.blocks_verdict(runs[:1])['passed']


def test_margin_sharp_both_ways_passes():
    rounds = [{'alone': probe('Paris', -0.0001), 'neighbour': probe('Paris', -0.0002)}] * 2
    assert g.margin_verdict(rounds, -0.1)['passed']


def test_margin_soft_alone_fails_naming_the_logprob_and_the_argmax():
    rounds = [{'alone': probe('Paris', -0.0001), 'neighbour': probe('Paris', -0.0001)},
              {'alone': probe(' A', -0.74, ('Paris', -1.49)), 'neighbour': probe('Paris', -0.0001)}]
    v = g.margin_verdict(rounds, -0.1)
    assert not v['passed']
    assert 'round 2 alone: top logprob -0.740 below -0.100' in v['evidence']
    assert "the argmax differs: [' A', 'Paris']" in v['evidence']
    assert 'no logprobs' in g.margin_verdict([{'alone': chat(), 'neighbour': probe('P', 0.0)}], -0.1)['evidence']


def test_needle_prompt_and_verdict():
    content, expected = g.needle_prompt(3, 4096)
    assert len(expected) == 3 and all(('The pass code for %s is %s.' % pair) in content for pair in expected)
    assert 3900 <= g.count_tokens(content) <= 4200
    answer = '\n'.join('%s: %s' % pair for pair in expected)
    assert g.needles_verdict([{'needles': 3, 'tokens': 4096, 'expected': expected, 'answer': answer}])['passed']
    v = g.needles_verdict([{'needles': 3, 'tokens': 4096, 'prompt_tokens': 4101, 'expected': expected,
                            'answer': answer.split('\n', maxsplit=1)[0]}])
    assert not v['passed'] and '3 needles at 4101 tokens: %s expected %s, got nothing' % expected[1] in v['evidence']


METRICS = '''# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="srv"} %s
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="srv"} %s
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="srv"} %s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="srv",position="0"} 1.0
'''


def reading(drafts, drafted, accepted):
    return g.parse_metrics(METRICS % (drafts, drafted, accepted))


FLOORS = {'code': {'acceptance': 0.75, 'tokens_per_step': 3.0}, 'prose': {'acceptance': 0.45, 'tokens_per_step': 2.2}}


def test_acceptance_from_metric_deltas_like_seed_004():
    # seed 004: code 0.847 and 3.54 tokens per step with three draft tokens per step
    rate, per_step, drafts = g.acceptance(reading(10, 30, 5), reading(110, 330, 259.1))
    assert drafts == 100 and round(rate, 3) == 0.847 and round(per_step, 2) == 3.54
    readings = {'code': (reading(0, 0, 0), reading(100, 300, 254)), 'prose': (reading(100, 300, 254), reading(200, 600, 412))}
    assert g.acceptance_verdict(readings, FLOORS)['passed']


def test_acceptance_below_the_floor_names_the_figure():
    readings = {'code': (reading(0, 0, 0), reading(100, 500, 40)), 'prose': (reading(0, 0, 0), reading(0, 0, 0))}
    v = g.acceptance_verdict(readings, FLOORS)
    assert not v['passed']
    assert 'code acceptance 0.080 below the floor 0.750' in v['evidence']
    assert 'code 1.40 tokens per step below the floor 3.00' in v['evidence']
    assert 'prose: no drafts counted' in v['evidence']


def test_decode_rate_from_usage_tokens_not_frames():
    stream = {'usage': {'completion_tokens': 129}, 't_first': 0.5, 't_last': 2.1}
    assert g.decode_rate(stream) == pytest.approx(80.0)
    assert g.decode_verdict(stream, 50)['passed']
    v = g.decode_verdict(stream, 100)
    assert not v['passed'] and 'decode below the floor: 80.0 tok/s over 129 tokens (floor 100.0)' == v['evidence']
    assert not g.decode_verdict({'usage': None}, 1)['passed']


@pytest.mark.parametrize('payload, ok, words', [
    (chat(None, 'length', tool_calls=[]), True, 'reported finish_reason "length"'),
    (chat(None, 'tool_calls', tool_calls=[{'function': {'arguments': '{"city": "Pa'}}]), False, "reported finish_reason 'tool_calls'"),
    (chat(None, 'length', tool_calls=[{'function': {'arguments': '{"city": "Pa'}}]), False, 'unparseable arguments'),
], ids=['length', 'tool-calls', 'broken-args'])
def test_finish_reason(payload, ok, words):
    v = g.finish_reason_verdict(payload, 8)
    assert v['passed'] is ok and words in v['evidence']


def test_report_lines_and_failed():
    verdicts = [g.verdict('a', True, 'fine'), g.verdict('b', False, 'broken')]
    assert g.report_lines(verdicts) == ['PASS a: fine', 'FAIL b: broken']
    assert g.failed(verdicts) == ['b']
