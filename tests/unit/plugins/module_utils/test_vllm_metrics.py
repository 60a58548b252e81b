# -*- coding: utf-8 -*-
"""The /metrics parser and the watchdog's stall verdict (plugins/module_utils/vllm_metrics.py).

The samples follow what vLLM's v1 engine publishes (sim/SOURCES.md, "vLLM stand-in: watchdog"): the prompt
counter moves once per request when its prefill ends, the generation counter with every token, the KV usage
gauge at every engine step, also inside a long prefill.
"""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import guards
from ansible_collections.dgxspark.cluster.plugins.module_utils import vllm_metrics as vm

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="srv"} 1.0
vllm:num_requests_waiting{engine="0",model_name="srv"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="srv"} 0.0312
vllm:prompt_tokens_total{engine="0",model_name="srv"} 468540.0
vllm:generation_tokens_total{engine="0",model_name="srv"} 77.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="srv"} 1.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="srv"} 3.0
"""


def test_one_parser_for_every_reader():
    assert guards.parse_metrics is vm.parse_metrics      # the guards and the benchmark read /metrics through it
    metrics = vm.parse_metrics(PAGE)
    assert metrics['vllm:request_success_total'] == 4.0  # summed over its labels
    sample = vm.sample_of(metrics, 5.0)
    assert sample == {'t': 5.0, 'running': 1.0, 'waiting': 2.0, 'prompt': 468540.0, 'generation': 77.0, 'kv': 0.0312}


def test_the_older_kv_gauge_name_and_a_page_without_counters():
    assert vm.sample_of({'vllm:prompt_tokens_total': 1.0, 'vllm:generation_tokens_total': 2.0,
                         'vllm:gpu_cache_usage_perc': 0.5}, 0)['kv'] == 0.5
    assert vm.sample_of({'vllm:prompt_tokens_total': 1.0, 'vllm:generation_tokens_total': 2.0}, 0)['kv'] is None
    assert vm.sample_of(vm.parse_metrics('# nothing here\n'), 0) is None


def s(t, running=1, waiting=0, prompt=100, generation=10, kv=0.1):
    return {'t': float(t), 'running': float(running), 'waiting': float(waiting), 'prompt': float(prompt),
            'generation': float(generation), 'kv': kv}


def run(samples, stall_sec=60, incarnations=None):
    state, out = {}, []
    for i, sample in enumerate(samples):
        state, verdict = vm.assess(state, sample, (incarnations or {}).get(i, 'inv-1'), stall_sec)
        out.append((verdict['status'], verdict['still']))
    return out


CASES = {
    # requests in, nothing moves: waiting until the window is full, then stalled (the seconds since the last move)
    'wedge': ([s(0), s(30), s(59), s(60), s(120)],
              [('baseline', 0.0), ('waiting', 30.0), ('waiting', 59.0), ('stalled', 60.0), ('stalled', 120.0)]),
    # seed 000's 468,540-token prefill: 498 s with both counters flat, the KV usage growing at each step
    'long prefill (KV grows)': ([s(t, kv=0.001 * t) for t in range(0, 540, 60)] + [s(540, prompt=468640, generation=11, kv=0.54)],
                                [('baseline', 0.0)] + [('progress', 0.0)] * 9),
    # the same prefill on a vLLM whose page has no KV gauge: 600 s covers it, a 30 s window does not
    'long prefill, no KV gauge, 600 s': ([s(t, kv=None) for t in (0, 120, 240, 360, 480)] + [s(498, prompt=468640, generation=11, kv=None)],
                                         [('baseline', 0.0), ('waiting', 120.0), ('waiting', 240.0), ('waiting', 360.0),
                                          ('waiting', 480.0), ('progress', 0.0)]),
    'decode moves': ([s(0), s(50, generation=11), s(100, generation=12), s(150, generation=13)],
                     [('baseline', 0.0), ('progress', 0.0), ('progress', 0.0), ('progress', 0.0)]),
    # an idle engine is never stalled; the window starts when the first request comes in
    'idle, then a request': ([s(0, running=0), s(300, running=0), s(330), s(359), s(360)],
                             [('baseline', 0.0), ('idle', 0.0), ('waiting', 30.0), ('waiting', 59.0), ('stalled', 60.0)]),
    'only waiting requests': ([s(0, running=0, waiting=3), s(61, running=0, waiting=3)],
                              [('baseline', 0.0), ('stalled', 61.0)]),
    # the counters went back (the engine restarted under the same unit start, e.g. docker restarted the container)
    'counters reset': ([s(0), s(50), s(70, prompt=0, generation=0, kv=0.0), s(100, prompt=0, generation=0, kv=0.0)],
                       [('baseline', 0.0), ('waiting', 50.0), ('baseline', 0.0), ('waiting', 30.0)]),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_stall_verdicts(name):
    samples, expected = CASES[name]
    stall = 600 if '600' in name else 60
    assert run(samples, stall_sec=stall) == expected


def test_a_new_serving_process_starts_a_fresh_window():
    got = run([s(0), s(59), s(70), s(100)], incarnations={2: 'inv-2', 3: 'inv-2'})
    assert got == [('baseline', 0.0), ('waiting', 59.0), ('baseline', 0.0), ('waiting', 30.0)]


def test_a_slow_prefill_over_a_short_window_would_be_stalled_without_the_kv_gauge():
    """Why the KV gauge counts: the same flat counters over 90 s stall a 60 s window when it does not move."""
    flat = [s(t, kv=0.25) for t in (0, 30, 60, 90)]
    growing = [s(t, kv=0.25 + t / 1000) for t in (0, 30, 60, 90)]
    assert run(flat)[-1] == ('stalled', 90.0)
    assert run(growing)[-1] == ('progress', 0.0)


def test_restart_bound():
    assert vm.restarts_left([], 1000.0, 3600, 3) == ([], 3)
    assert vm.restarts_left([100.0, 200.0, 300.0], 1000.0, 3600, 3) == ([100.0, 200.0, 300.0], 0)
    assert vm.restarts_left([100.0, 200.0, 300.0], 3750.0, 3600, 3) == ([200.0, 300.0], 1)
    assert vm.restarts_left([100.0], 200.0, 3600, 0) == ([100.0], 0)


def test_evidence_names_the_counters_and_the_window():
    line = vm.evidence_line(s(0, running=2, waiting=1, prompt=5, generation=6, kv=0.125), {'still': 61.4}, 60)
    assert line == ('running 2, waiting 1, prompt_tokens_total 5, generation_tokens_total 6, kv_cache_usage_perc 0.1250: '
                    'nothing moved for 61 s (service_watchdog_stall_sec 60)')
