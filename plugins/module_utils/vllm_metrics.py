# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's Prometheus ``/metrics`` page and the watchdog's stall verdict (pure, stdlib only).

One parser for every reader of ``/metrics``: the validation guards (acceptance
canary), the benchmark, and the serving watchdog the service role installs on
the head (it copies this file beside ``dgxspark_vllm_watchdog.py``, as the nic
role ships ``roce_gids.py`` with its resolver).

What vLLM's v1 engine publishes, and when it moves (vllm/v1/metrics/loggers.py,
stats.py, core/sched/scheduler.py; sim/SOURCES.md "vLLM stand-in: watchdog"):

- ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``: gauges of the
  scheduler, sent with every engine step.
- ``vllm:prompt_tokens_total``: a counter that takes a request's whole prompt
  length once, with the request's first output (``is_prefilling``), i.e. when
  its prefill ends; it does not move chunk by chunk during a long prefill.
- ``vllm:generation_tokens_total``: a counter of the tokens generated.
- ``vllm:kv_cache_usage_perc`` (earlier ``vllm:gpu_cache_usage_perc``): a gauge
  of the scheduler, sent every step even without request output, so it grows
  chunk by chunk while a long prefill allocates its blocks: the one signal that
  moves inside a prefill.

The engine is stalled when requests are running or waiting and none of those
three moved for the stall window; an idle engine (nothing running or waiting)
is never stalled: the 1-token probe covers it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

METRIC_RE = re.compile(r'^(vllm:[a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|\+Inf)\s*$', re.M)

RUNNING = 'vllm:num_requests_running'
WAITING = 'vllm:num_requests_waiting'
PROMPT = 'vllm:prompt_tokens_total'
GENERATION = 'vllm:generation_tokens_total'
KV_USAGE = ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
COUNTERS = (PROMPT, GENERATION)


def parse_metrics(text):
    """Sum of each vllm:* sample over its labels (Prometheus text format).

    >>> parse_metrics('# HELP x\\nvllm:spec_decode_num_drafts_total{engine="0"} 4.0\\n')
    {'vllm:spec_decode_num_drafts_total': 4.0}
    """
    out = {}
    for name, _labels, value in METRIC_RE.findall(text or ''):
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def sample_of(metrics, now):
    """The watchdog's sample of a parsed /metrics page at time ``now`` (seconds); None without the counters.

    >>> sample_of({'vllm:num_requests_running': 1.0, 'vllm:prompt_tokens_total': 5.0,
    ...            'vllm:generation_tokens_total': 7.0, 'vllm:kv_cache_usage_perc': 0.25}, 10.0)['kv']
    0.25
    """
    if not all(name in metrics for name in COUNTERS):
        return None
    kv = next((metrics[name] for name in KV_USAGE if name in metrics), None)
    return {'t': float(now), 'running': metrics.get(RUNNING, 0.0), 'waiting': metrics.get(WAITING, 0.0),
            'prompt': metrics[PROMPT], 'generation': metrics[GENERATION], 'kv': kv}


def assess(state, sample, incarnation, stall_sec):
    """The stall verdict of one sample against the previous ``state``; returns (new state, verdict).

    ``state`` is what the last call returned (``{}`` at first); ``incarnation`` names the
    serving process (its start time): a new one, or a counter that went back, starts afresh.
    The verdict is a dict: ``status`` one of ``baseline`` (first sample of this process),
    ``idle`` (nothing running or waiting), ``progress`` (a counter or the KV usage moved),
    ``waiting`` (busy, nothing moved, for less than ``stall_sec``), ``stalled`` (busy and
    nothing moved for ``stall_sec`` or more); ``still`` is the seconds nothing moved while busy,
    ``moved`` what moved.

    >>> s, v = assess({}, {'t': 0.0, 'running': 1.0, 'waiting': 0.0, 'prompt': 10.0, 'generation': 5.0, 'kv': 0.1}, 'a', 60)
    >>> v['status']
    'baseline'
    >>> s, v = assess(s, dict(s['last'], t=61.0), 'a', 60)
    >>> v['status'], v['still']
    ('stalled', 61.0)
    """
    last = state.get('last') if state.get('incarnation') == incarnation else None
    busy = sample['running'] > 0 or sample['waiting'] > 0
    if last is None or any(sample[k] < last[k] for k in ('prompt', 'generation')):
        new = {'incarnation': incarnation, 'last': sample, 'still_since': sample['t']}
        return new, {'status': 'baseline', 'still': 0.0, 'moved': []}
    moved = [k for k in ('prompt', 'generation') if sample[k] > last[k]]
    if sample['kv'] is not None and last.get('kv') is not None and sample['kv'] != last['kv']:
        moved.append('kv')
    if moved or not busy:
        new = {'incarnation': incarnation, 'last': sample, 'still_since': sample['t']}
        return new, {'status': 'progress' if moved else 'idle', 'still': 0.0, 'moved': moved}
    since = state.get('still_since', last['t'])
    still = sample['t'] - since
    new = {'incarnation': incarnation, 'last': sample, 'still_since': since}
    return new, {'status': 'stalled' if still >= stall_sec else 'waiting', 'still': still, 'moved': []}


def restarts_left(restart_times, now, window_sec, max_restarts):
    """(restart times still inside the window, how many more restarts the bound allows).

    >>> restarts_left([10.0, 500.0, 900.0], 1000.0, 600, 2)
    ([500.0, 900.0], 0)
    """
    kept = [t for t in restart_times if now - t < window_sec]
    return kept, max(0, int(max_restarts) - len(kept))


def evidence_line(sample, verdict, stall_sec):
    """One line of evidence for the log: the counters, how long nothing moved, the window.

    >>> evidence_line({'t': 0, 'running': 1.0, 'waiting': 2.0, 'prompt': 3.0, 'generation': 4.0, 'kv': None},
    ...               {'still': 90.0}, 60)
    'running 1, waiting 2, prompt_tokens_total 3, generation_tokens_total 4, kv_cache_usage_perc n/a: nothing moved for 90 s (service_watchdog_stall_sec 60)'
    """
    kv = 'n/a' if sample.get('kv') is None else '%.4f' % sample['kv']
    return ('running %d, waiting %d, prompt_tokens_total %d, generation_tokens_total %d, kv_cache_usage_perc %s: '
            'nothing moved for %d s (service_watchdog_stall_sec %d)'
            % (sample['running'], sample['waiting'], sample['prompt'], sample['generation'], kv, verdict['still'],
               stall_sec))
