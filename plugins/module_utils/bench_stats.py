# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark arithmetic (seed 004's method): per-stream figures, medians with spread, the table, the comparison.

Pure functions, stdlib only; the vllm_benchmark module measures, benchmark_report writes.

A stream (vllm_api.Client.stream) is ``{'ttft', 't_first', 't_last', 'usage': {'prompt_tokens',
'completion_tokens'}}``, times in seconds from sending. Its decode tok/s is
``(completion_tokens - 1) / (t_last - t_first)``: tokens from the usage, not SSE frames
(a DSpark step sends several tokens in one frame).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# figure -> True when higher is better
FIGURES = {'ttft_s': False, 'prefill_tok_s': True, 'decode_tok_s': True, 'aggregate_tok_s': True, 'acceptance': True,
           'tokens_per_step': True}


def median(values):
    """The median (the mean of the middle two for an even count); None for no values.

    >>> median([3, 1, 2]), median([1, 2, 3, 4]), median([])
    (2, 2.5, None)
    """
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2.0


def summary(values):
    """{'median', 'min', 'max', 'spread' (max - min relative to the median), 'n'}."""
    vals = [v for v in values if v is not None]
    med = median(vals)
    if med is None:
        return {'median': None, 'min': None, 'max': None, 'spread': None, 'n': 0}
    return {'median': round(med, 4), 'min': round(min(vals), 4), 'max': round(max(vals), 4),
            'spread': round((max(vals) - min(vals)) / med, 4) if med else 0.0, 'n': len(vals)}


def stream_figures(stream):
    """TTFT, prefill tok/s, decode tok/s of one stream (None where it cannot be computed)."""
    usage = stream.get('usage') or {}
    prompt, completion = usage.get('prompt_tokens'), usage.get('completion_tokens')
    ttft, t_first, t_last = stream.get('ttft'), stream.get('t_first'), stream.get('t_last')
    decode = None
    if completion and completion > 1 and t_first is not None and t_last is not None and t_last > t_first:
        decode = (completion - 1) / (t_last - t_first)
    prefill = prompt / ttft if prompt and ttft else None
    return {'ttft_s': ttft, 'prefill_tok_s': prefill, 'decode_tok_s': decode}


def cell(prompt_tokens, concurrency, repeats):
    """One sweep cell from its repeats ``[{'streams': [...], 'acceptance': a, 'tokens_per_step': t}]``.

    Per repeat: TTFT, prefill and decode are the median over its streams; aggregate tok/s
    is the sum of the streams' decode tok/s (all streams generating together).
    """
    per = {name: [] for name in FIGURES}
    for rep in repeats:
        figs = [stream_figures(s) for s in rep['streams']]
        for name in ('ttft_s', 'prefill_tok_s', 'decode_tok_s'):
            per[name].append(median([f[name] for f in figs]))
        decodes = [f['decode_tok_s'] for f in figs if f['decode_tok_s'] is not None]
        per['aggregate_tok_s'].append(sum(decodes) if decodes else None)
        per['acceptance'].append(rep.get('acceptance'))
        per['tokens_per_step'].append(rep.get('tokens_per_step'))
    out = {'prompt_tokens': prompt_tokens, 'concurrency': concurrency, 'repeats': len(repeats)}
    out.update({name: summary(vals) for name, vals in per.items()})
    return out


def run_name(date, host, revision, version):
    """The folder of a run: date, host, checkpoint revision (12 chars), vLLM/image version, filesystem-safe.

    >>> run_name('20261201T151200Z', 'spark-head', '9e165c30e2704aec5d9d593cce3eebd58bbef1cb', '0.27.1+spark.sim')
    '20261201T151200Z_spark-head_9e165c30e270_vllm-0.27.1+spark.sim'
    """
    raw = '%s_%s_%s_vllm-%s' % (date, host, (revision or 'unpinned')[:12], version or 'unknown')
    return re.sub(r'[^A-Za-z0-9._+-]', '-', raw)


def fmt(value, digits=1):
    return '-' if value is None else ('%.*f' % (digits, value))


def markdown(results):
    """The Markdown table of a run (medians, spread in parentheses)."""
    meta = results.get('meta') or {}
    lines = ['# Benchmark %s' % meta.get('name', ''), '',
             'host %s, checkpoint %s, vLLM %s, %s; medians of %s with their spread (max - min over the median).'
             % (meta.get('host'), meta.get('revision'), meta.get('version'), meta.get('date'), meta.get('repeats')), '',
             '| prompt tokens | concurrency | TTFT s | prefill tok/s | decode tok/s | aggregate tok/s | acceptance | tokens/step |',
             '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    for c in results.get('cells') or []:
        def col(name, digits=1):
            s = c[name]
            return '%s (%s%%)' % (fmt(s['median'], digits), fmt((s['spread'] or 0) * 100, 0)) if s['median'] is not None else '-'
        lines.append('| %d | %d | %s | %s | %s | %s | %s | %s |' % (
            c['prompt_tokens'], c['concurrency'], col('ttft_s', 3), col('prefill_tok_s', 0), col('decode_tok_s'),
            col('aggregate_tok_s'), col('acceptance', 3), col('tokens_per_step', 2)))
    return '\n'.join(lines) + '\n'


def compare(baseline, candidate, threshold):
    """Regressions of ``candidate`` against ``baseline`` beyond ``threshold`` (relative), per matching cell.

    Returns (regressions, rows): each ``{'prompt_tokens', 'concurrency', 'figure', 'baseline',
    'candidate', 'change'}``, change relative to the baseline (negative = lower).
    """
    base = {(c['prompt_tokens'], c['concurrency']): c for c in baseline.get('cells') or []}
    regressions, rows = [], []
    for c in candidate.get('cells') or []:
        b = base.get((c['prompt_tokens'], c['concurrency']))
        if not b:
            continue
        for name, higher_better in FIGURES.items():
            bv, cv = (b.get(name) or {}).get('median'), (c.get(name) or {}).get('median')
            if not bv or cv is None:
                continue
            change = (cv - bv) / bv
            row = {'prompt_tokens': c['prompt_tokens'], 'concurrency': c['concurrency'], 'figure': name,
                   'baseline': bv, 'candidate': cv, 'change': round(change, 4)}
            rows.append(row)
            worse = -change if higher_better else change
            if worse > threshold:
                regressions.append(row)
    return regressions, rows


def compare_lines(regressions, threshold):
    if not regressions:
        return ['no regression beyond %.0f%%' % (threshold * 100)]
    out = []
    for r in regressions:
        out.append('REGRESSION %s at %d tokens x %d: %s -> %s (%+.1f%%)'
                   % (r['figure'], r['prompt_tokens'], r['concurrency'], fmt(r['baseline'], 3), fmt(r['candidate'], 3),
                      r['change'] * 100))
    return out
