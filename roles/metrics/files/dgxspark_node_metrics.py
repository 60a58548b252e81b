# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One tick of the node metrics (dgxspark-node-metrics.service, run by its timer on every node).

    dgxspark_node_metrics.py --unit dgxspark-vllm.service

Writes ``node.prom`` in the textfile directory (textfile_metrics.py beside this file, the collection's
module_utils): ``dgxspark_memavailable_bytes`` (/proc/meminfo, parsed by the collection's memory.py) and
``dgxspark_serving_state`` (the serving unit's ActiveState, one sample per state, 1 for the current one).
Exit 0 written (or the metrics off), 1 when /proc/meminfo has no MemAvailable.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# the collection's plugins/module_utils, installed beside this file by the metrics role
import memory  # noqa: E402 pylint: disable=wrong-import-position
import textfile_metrics  # noqa: E402 pylint: disable=wrong-import-position


def unit_state(unit):
    proc = subprocess.run(['systemctl', 'show', '-p', 'ActiveState', '--value', unit], capture_output=True, text=True,
                          check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ''


def main(argv=None):
    parser = argparse.ArgumentParser(prog='dgxspark-node-metrics', description=__doc__.splitlines()[0])
    parser.add_argument('--unit', required=True, help='the serving unit')
    args = parser.parse_args(argv)
    info = memory.read_meminfo()
    if 'MemAvailable' not in info:
        print('dgxspark-node-metrics: /proc/meminfo has no MemAvailable', file=sys.stderr)
        return 1
    state = unit_state(args.unit)
    samples = [('dgxspark_memavailable_bytes', {}, info['MemAvailable'] * 1024)]
    states = list(textfile_metrics.SERVING_STATES) + ([state] if state and state not in textfile_metrics.SERVING_STATES else [])
    samples += [('dgxspark_serving_state', {'unit': args.unit, 'state': name}, 1 if name == state else 0) for name in states]
    textfile_metrics.write('node', samples)
    return 0


if __name__ == '__main__':
    sys.exit(main())
