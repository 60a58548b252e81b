# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's own ``dgxspark_*`` metrics, written for node exporter's textfile collector (stdlib only).

One file per writer in ``DEFAULT_DIR`` (root-owned, 0755: node exporter, a less trusted user, only reads it),
each written atomically (a hidden temporary file in the same directory, then ``rename``): the collector reads
``*.prom`` files only, so it never sees a half-written one. A writer writes only when the directory exists (the
metrics role made it); without it the metrics are off and nothing is written.

Shipped to the nodes beside the scripts that import it (``/usr/local/lib/dgxspark/textfile_metrics.py``) by the
metrics role; the shell clock cap script calls it as a command::

    python3 textfile_metrics.py NAME METRIC=VALUE [METRIC=VALUE ...]     # writes DEFAULT_DIR/NAME.prom

``CATALOGUE`` is the one list of names, types and meanings (the README table is made from it, a test compares).
"""

from __future__ import annotations

import math
import os
import re
import sys

DEFAULT_DIR = os.environ.get('DGXSPARK_METRICS_DIR') or '/var/lib/dgxspark/metrics'

# name -> (type, help, writer)
CATALOGUE = {
    'dgxspark_clock_cap_applied': (
        'gauge', '1 when the last apply of the clock cap unit capped the SM clock, 0 when it failed or the cap was released',
        'the clock cap unit (dgxspark-clock-cap apply / release)'),
    'dgxspark_clock_cap_max_mhz': (
        'gauge', 'The SM clock ceiling the last apply asked for (clock_cap_max_mhz), MHz', 'the clock cap unit'),
    'dgxspark_sm_clock_mhz': (
        'gauge', 'The SM clock nvidia-smi read back after the last apply, MHz', 'the clock cap unit'),
    'dgxspark_nccl_gid_index': (
        'gauge', 'The RoCE GID index NCCL uses on this rail (labels rail, device, port, netdev, ipv4), resolved at the last '
        'start of the serving unit', 'the NCCL resolver (ExecStartPre of the serving unit)'),
    'dgxspark_nccl_gid_resolved': (
        'gauge', '1 when the NCCL resolver found the fabric GID at the last start of the serving unit, 0 when it failed closed',
        'the NCCL resolver'),
    'dgxspark_fabric_gbps': (
        'gauge', 'The last measured RDMA write bandwidth of this rail (labels rail, netdev, peer, direction), Gb/s',
        'the nic role (its ib_write_bw round)'),
    'dgxspark_checkpoint_verified_info': (
        'gauge', '1, labelled with the checkpoint repo and revision the checkpoint role last verified on this node',
        'the checkpoint role (after its verify)'),
    'dgxspark_serving_state': (
        'gauge', '1 for the serving unit\'s current state (label state: active, activating, deactivating, inactive, failed), '
        '0 for the others', 'the node metrics timer (dgxspark-node-metrics)'),
    'dgxspark_memavailable_bytes': (
        'gauge', 'MemAvailable of /proc/meminfo (GB10 memory is unified: the GPU\'s memory too), bytes',
        'the node metrics timer'),
    'dgxspark_watchdog_stalls_total': (
        'counter', 'Wedged engines the watchdog found on the head (each episode once)', 'the watchdog (head)'),
    'dgxspark_watchdog_restarts_total': (
        'counter', 'Restarts of the ranks the watchdog made', 'the watchdog (head)'),
    'dgxspark_watchdog_not_restarted_total': (
        'counter', 'Wedges the watchdog only reported (service_watchdog_restart false, or the restart bound reached)',
        'the watchdog (head)'),
    'dgxspark_watchdog_last_tick_timestamp_seconds': (
        'gauge', 'Unix time of the watchdog\'s last tick', 'the watchdog (head)'),
}

SERVING_STATES = ('active', 'activating', 'deactivating', 'inactive', 'failed')

_NAME = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
_LABEL = re.compile(r'^[a-zA-Z_][a-zA-Z0-9_]*$')
_FILE = re.compile(r'^[a-z0-9][a-z0-9_-]*$')


class MetricsError(ValueError):
    """A metric that cannot be written (a bug in the writer, never a node state)."""


def _escape(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _number(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    number = float(value)
    if math.isnan(number):
        return 'NaN'
    if math.isinf(number):
        return '+Inf' if number > 0 else '-Inf'
    return str(int(number)) if number == int(number) and abs(number) < 2 ** 53 else repr(number)


def render(samples):
    """[(name, {label: value}, value)] -> the text exposition format, HELP and TYPE once per name, in catalogue order."""
    by_name = {}
    for name, labels, value in samples:
        if name not in CATALOGUE:
            raise MetricsError('%s is not in the dgxspark metrics catalogue' % name)
        for key in labels or {}:
            if not _LABEL.match(key):
                raise MetricsError('%s: bad label name %r' % (name, key))
        by_name.setdefault(name, []).append((labels or {}, value))
    lines = []
    for name in CATALOGUE:
        if name not in by_name:
            continue
        kind, help_text, _writer = CATALOGUE[name]
        lines.append('# HELP %s %s' % (name, help_text.replace('\\', '\\\\').replace('\n', ' ')))
        lines.append('# TYPE %s %s' % (name, kind))
        for labels, value in by_name[name]:
            label_text = ','.join('%s="%s"' % (key, _escape(labels[key])) for key in sorted(labels))
            lines.append('%s%s %s' % (name, '{%s}' % label_text if label_text else '', _number(value)))
    return '\n'.join(lines) + '\n' if lines else ''


def write(name, samples, directory=None):
    """Write ``directory/name.prom`` atomically; False (nothing written) when the directory does not exist."""
    directory = directory or DEFAULT_DIR
    if not _FILE.match(name or ''):
        raise MetricsError('bad metrics file name %r' % name)
    text = render(samples)
    if not os.path.isdir(directory):
        return False
    path = os.path.join(directory, name + '.prom')
    tmp = os.path.join(directory, '.%s.prom.%d' % (name, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


def read(text):
    """Exposition text -> [(name, {label: value}, float)] (comments skipped): the tests' and doctor's reader."""
    out = []
    row = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
    pair = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in (text or '').splitlines():
        if not line or line.startswith('#'):
            continue
        match = row.match(line)
        if not match:
            continue
        labels = dict((key, value.replace('\\"', '"').replace('\\n', '\n').replace('\\\\', '\\'))
                      for key, value in pair.findall(match.group(2) or ''))
        try:
            out.append((match.group(1), labels, float(match.group(3))))
        except ValueError:
            continue
    return out


def main(argv=None):
    """``textfile_metrics.py NAME METRIC=VALUE ...``: exit 0 written or metrics off, 2 usage."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        sys.stderr.write('usage: textfile_metrics.py NAME METRIC=VALUE [METRIC=VALUE ...]\n')
        return 2
    samples = []
    try:
        for arg in argv[1:]:
            key, sep, value = arg.partition('=')
            if not sep:
                raise MetricsError('%r is not METRIC=VALUE' % arg)
            samples.append((key, {}, float(value)))
        write(argv[0], samples)
    except (MetricsError, ValueError, OSError) as exc:
        sys.stderr.write('textfile_metrics.py: %s\n' % exc)
        return 2 if isinstance(exc, ValueError) else 1
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
