# -*- coding: utf-8 -*-
"""Benchmark arithmetic (plugins/module_utils/bench_stats.py): figures, medians with spread, compare."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import bench_stats as bs


def stream(prompt, completion, ttft, t_last):
    return {'ttft': ttft, 't_first': ttft, 't_last': t_last, 'usage': {'prompt_tokens': prompt, 'completion_tokens': completion}}


def test_stream_figures_use_tokens_from_the_usage():
    f = bs.stream_figures(stream(4096, 257, 0.5, 4.5))
    assert f == {'ttft_s': 0.5, 'prefill_tok_s': 8192.0, 'decode_tok_s': 64.0}
    assert bs.stream_figures(stream(10, 1, 0.1, 0.1))['decode_tok_s'] is None


def test_summary_median_and_spread():
    assert bs.summary([60.0, 64.0, 62.0]) == {'median': 62.0, 'min': 60.0, 'max': 64.0, 'spread': 0.0645, 'n': 3}
    assert bs.summary([None])['median'] is None


def test_cell_aggregate_is_the_sum_of_the_streams():
    reps = [{'streams': [stream(256, 65, 0.1, 2.1)] * 6, 'acceptance': 0.55, 'tokens_per_step': 3.7}] * 3
    c = bs.cell(256, 6, reps)
    assert c['decode_tok_s']['median'] == pytest.approx(32.0)
    assert c['aggregate_tok_s']['median'] == pytest.approx(192.0)
    assert c['acceptance']['median'] == 0.55 and c['repeats'] == 3


def results(decode, ttft=0.5):
    reps = [{'streams': [stream(4096, 129, ttft, ttft + 128 / decode)], 'acceptance': 0.55, 'tokens_per_step': 3.7}] * 3
    return {'meta': {'name': 'r', 'host': 'h', 'revision': 'x', 'version': 'v', 'date': 'd', 'repeats': 3},
            'cells': [bs.cell(4096, 1, reps)]}


def test_compare_flags_a_slower_decode_and_a_longer_ttft_only_beyond_the_threshold():
    regressions, rows = bs.compare(results(60.0), results(15.0, ttft=0.6), 0.1)
    figures = {r['figure']: r for r in regressions}
    assert set(figures) == {'decode_tok_s', 'aggregate_tok_s', 'ttft_s', 'prefill_tok_s'}
    assert figures['decode_tok_s']['change'] == pytest.approx(-0.75)
    assert 'REGRESSION decode_tok_s at 4096 tokens x 1: 60.000 -> 15.000 (-75.0%)' in bs.compare_lines(regressions, 0.1)
    assert bs.compare(results(60.0), results(57.0), 0.1)[0] == []
    assert bs.compare(results(60.0), results(90.0), 0.1)[0] == []
    assert len(rows) == 6
    assert bs.compare_lines([], 0.1) == ['no regression beyond 10%']


def test_markdown_table_has_a_row_per_cell():
    text = bs.markdown(results(60.0))
    assert '| 4096 | 1 | 0.500 (0%) | 8192 (0%) | 60.0 (0%) | 60.0 (0%) | 0.550 (0%) | 3.70 (0%) |' in text


def test_run_name_is_filesystem_safe():
    assert bs.run_name('20261201T000000Z', 'spark head', '', 'a/b') == '20261201T000000Z_spark-head_unpinned_vllm-a-b'
