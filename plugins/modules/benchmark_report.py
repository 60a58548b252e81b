#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchmark_report
short_description: Write a benchmark run's folder (JSON, Markdown, PNG plots) and compare two runs
version_added: 0.1.0
description:
  - Runs on the controller. With O(results), writes
    O(results_dir)/<date>_<host>_<revision>_vllm-<version>/ with C(results.json), C(results.md),
    C(decode_vs_context.png) (decode tok/s against prompt length, one line per concurrency) and
    C(ttft_vs_prompt.png) (TTFT against prompt length). The plots need matplotlib on the controller.
  - With O(baseline), compares the run (or O(candidate), a folder) with the baseline folder and
    returns the figures that got worse by more than O(threshold); C(compare.md) goes into the
    candidate's folder.
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
  results:
    description: The results of M(dgxspark.cluster.vllm_benchmark) (omit to only compare).
    type: dict
  results_dir:
    description: Where run folders go.
    type: path
  host:
    description: The head's name, for the folder name.
    type: str
    default: ''
  revision:
    description: The checkpoint revision for the folder name when the results carry none.
    type: str
    default: ''
  image:
    description: The serving container image (container runtime), appended to the version in the folder name.
    type: str
    default: ''
  baseline:
    description: A run folder to compare against.
    type: path
  candidate:
    description: The run folder compared with O(baseline) when O(results) is not given.
    type: path
  threshold:
    description: A figure worse than the baseline by more than this (relative) is a regression.
    type: float
    default: 0.1
"""

EXAMPLES = r"""
- name: Write the run and compare it with last week's
  dgxspark.cluster.benchmark_report:
    results: "{{ bench.benchmark }}"
    results_dir: /srv/benchmarks
    host: spark-head
    revision: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    baseline: /srv/benchmarks/20261124T101500Z_spark-head_9e165c30e270_vllm-0.27.1
  delegate_to: localhost
"""

RETURN = r"""
folder:
  description: The candidate's run folder.
  type: str
  returned: always
regressions:
  description: Figures worse than the baseline beyond the threshold.
  type: list
  elements: dict
  returned: always
lines:
  description: The comparison, one line per regression (or one line saying there is none).
  type: list
  elements: str
  returned: when baseline is set
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import bench_stats as bs


def plot(path, cells, y_name, title, ylabel):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - matplotlib.ticker.ScalarFormatter below
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for conc in sorted({c['concurrency'] for c in cells}):
        points = sorted((c['prompt_tokens'], c[y_name]) for c in cells if c['concurrency'] == conc and c[y_name]['median'] is not None)
        if not points:
            continue
        xs = [point[0] for point in points]
        figs = [point[1] for point in points]
        ax.errorbar(xs, [f['median'] for f in figs],
                    yerr=[[f['median'] - f['min'] for f in figs], [f['max'] - f['median'] for f in figs]],
                    marker='o', capsize=3, label='concurrency %d' % conc)
    ax.set_xscale('log', base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_ylim(bottom=0)
    ax.set_xlabel('prompt tokens')
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format='png')
    plt.close(fig)


def load(folder):
    with open(os.path.join(folder, 'results.json')) as handle:
        return json.load(handle)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type='dict'),
            results_dir=dict(type='path'),
            host=dict(type='str', default=''),
            revision=dict(type='str', default=''),
            image=dict(type='str', default=''),
            baseline=dict(type='path'),
            candidate=dict(type='path'),
            threshold=dict(type='float', default=0.1),
        ),
        required_one_of=[('results', 'candidate')],
        required_by={'results': 'results_dir', 'candidate': 'baseline'},
        supports_check_mode=True,
    )
    p = module.params
    changed = False
    if p['results'] is not None:
        results = p['results']
        meta = results.setdefault('meta', {})
        stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
        revision = meta.get('revision') or p['revision']
        version = meta.get('version') or ''
        if p['image']:
            meta['image'] = p['image']
            version = '%s_%s' % (version, p['image'].rsplit('/', 1)[-1])
        meta.update(name=bs.run_name(stamp, p['host'], revision, version), host=p['host'], revision=revision)
        folder = os.path.join(p['results_dir'], meta['name'])
        if not module.check_mode:
            try:
                import matplotlib  # noqa: F401 - checked before anything is written
            except ImportError:
                module.fail_json(msg='benchmark_report on the controller needs matplotlib for the PNG plots '
                                     '(pip install -r requirements.txt into the venv that runs ansible-playbook)')
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, 'results.json'), 'w') as handle:
                json.dump(results, handle, indent=2, sort_keys=True)
                handle.write('\n')
            with open(os.path.join(folder, 'results.md'), 'w') as handle:
                handle.write(bs.markdown(results))
            plot(os.path.join(folder, 'decode_vs_context.png'), results['cells'], 'decode_tok_s',
                 'decode tok/s against context (median, min-max)', 'decode tok/s per stream')
            plot(os.path.join(folder, 'ttft_vs_prompt.png'), results['cells'], 'ttft_s',
                 'TTFT against prompt length (median, min-max)', 'time to first token (s)')
            changed = True
        candidate = results
    else:
        folder = p['candidate']
        try:
            candidate = load(folder)
        except (IOError, OSError, ValueError) as exc:
            module.fail_json(msg='candidate %s: cannot read results.json: %s' % (folder, exc))
    out = {'changed': changed, 'folder': folder, 'regressions': []}
    if p['baseline']:
        try:
            baseline = load(p['baseline'])
        except (IOError, OSError, ValueError) as exc:
            module.fail_json(msg='baseline %s: cannot read results.json: %s' % (p['baseline'], exc))
        regressions, rows = bs.compare(baseline, candidate, p['threshold'])
        lines = bs.compare_lines(regressions, p['threshold'])
        out.update(regressions=regressions, lines=lines)
        if not module.check_mode and os.path.isdir(folder):
            with open(os.path.join(folder, 'compare.md'), 'w') as handle:
                handle.write('# %s against %s\n\n' % (os.path.basename(folder.rstrip('/')), os.path.basename(p['baseline'].rstrip('/'))))
                handle.write('\n'.join('- ' + line for line in lines) + '\n\n| prompt tokens | concurrency | figure | baseline | '
                             'candidate | change |\n| ---: | ---: | --- | ---: | ---: | ---: |\n')
                for r in rows:
                    handle.write('| %d | %d | %s | %s | %s | %+.1f%% |\n'
                                 % (r['prompt_tokens'], r['concurrency'], r['figure'], bs.fmt(r['baseline'], 3),
                                    bs.fmt(r['candidate'], 3), r['change'] * 100))
            changed = True
            out['changed'] = changed
    module.exit_json(**out)


if __name__ == '__main__':
    main()
