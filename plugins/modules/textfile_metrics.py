#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: textfile_metrics
short_description: Write a role's dgxspark_* metrics for node exporter's textfile collector
version_added: 0.1.0
description:
  - Writes O(name).prom in the collection's textfile directory (/var/lib/dgxspark/metrics, made by the metrics role)
    atomically, with the collection's writer (plugins/module_utils/textfile_metrics.py, the same the node scripts use),
    only catalogued C(dgxspark_*) names, each with its HELP and TYPE.
  - Writes nothing when the directory does not exist (the metrics role did not run, or C(metrics_enabled) is false).
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
  name:
    description: The file's name without C(.prom) (lower case letters, digits, C(_) and C(-)).
    type: str
    required: true
  samples:
    description: The samples, each C(metric) (a catalogued name), C(labels) (a dict) and C(value) (a number).
    type: list
    elements: dict
    required: true
  directory:
    description: The textfile directory (tests point it elsewhere).
    type: path
"""

EXAMPLES = r"""
- name: Record the verified checkpoint revision
  dgxspark.cluster.textfile_metrics:
    name: checkpoint
    samples:
      - metric: dgxspark_checkpoint_verified_info
        labels: {repo: Qwen/Qwen3-235B-A22B-FP8, revision: 0123abc}
        value: 1
"""

RETURN = r"""
written:
  description: Whether the directory exists (false - the metrics are off, nothing written).
  type: bool
  returned: always
path:
  description: The file.
  type: str
  returned: always
  sample: /var/lib/dgxspark/metrics/checkpoint.prom
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import textfile_metrics as tm


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            samples=dict(type='list', elements='dict', required=True),
            directory=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    directory = module.params['directory'] or tm.DEFAULT_DIR
    path = os.path.join(directory, '%s.prom' % module.params['name'])
    try:
        samples = [(s.get('metric'), dict((str(k), str(v)) for k, v in (s.get('labels') or {}).items()), float(s.get('value')))
                   for s in module.params['samples']]
        text = tm.render(samples)
    except (tm.MetricsError, TypeError, ValueError) as exc:
        module.fail_json(msg='%s: %s' % (path, exc))
    if not os.path.isdir(directory):
        module.exit_json(changed=False, written=False, path=path, msg='%s does not exist: the metrics are off' % directory)
    try:
        with open(path, encoding='utf-8') as handle:
            changed = handle.read() != text
    except OSError:
        changed = True
    if changed and not module.check_mode:
        try:
            tm.write(module.params['name'], samples, directory)
        except (OSError, tm.MetricsError) as exc:
            module.fail_json(msg='%s: %s' % (path, exc))
    module.exit_json(changed=changed, written=True, path=path, msg='%s: %d sample(s)' % (path, len(samples)))


if __name__ == '__main__':
    main()
