# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which rank's log shows the first error (pure functions, standard library only, never imports ``ansible``).

A failed health check on the head gathers every node's last log lines (``journalctl -o short-unix`` for the
venv kind, ``docker logs --timestamps`` for the container kind). Seed 003: "The head lost a TP worker ...
Look at the OTHER node's memory and logs; the root cause is almost always there." ``first_error`` finds the
earliest error line across the nodes, so the message can name the node where it started.

A head whose engine hangs (/health 200, a 1-token request unanswered) lost a worker rank: vLLM's head does
not watch another node's processes and its mp engine takes no rank back. ``lost_ranks`` names the workers
that are gone from each node's unit state (``systemctl show`` lines, ``--timestamp=unix``) and, for the
container kind, its container's (``docker inspect``): a unit or container that does not run, a rank with no
main process, or one whose process started after the head's (the head's engine formed without it).
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

__all__ = ['ERROR_RE', 'line_time', 'first_error', 'unit_state', 'lost_ranks']

# An error line of vLLM, NCCL, Python or the recipe's start-up.
ERROR_RE = re.compile(r'(\bERROR\b|\bCRITICAL\b|\bFATAL\b|^Traceback|Traceback \(most recent call last\)|\b[A-Za-z]*Error\b[:(]|'
                      r'unhandled system error|\bNCCL WARN\b|\b(?:[Ff]ailed|FAILED)\b|\bexited\b.*status=[1-9])')
_UNIX_RE = re.compile(r'^\s*(\d{9,}(?:\.\d+)?)\s')
_RFC3339_RE = re.compile(r'^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})\s')


def line_time(line: str) -> Optional[float]:
    """Epoch seconds of a ``short-unix`` or RFC 3339 (docker ``--timestamps``) log line; None without one.

    >>> line_time('1733065000.250000 spark-worker vllm[12]: ERROR x')
    1733065000.25
    >>> line_time('2024-12-01T15:10:00.5Z ERROR x')
    1733065800.5
    """
    match = _UNIX_RE.match(line)
    if match:
        return float(match.group(1))
    match = _RFC3339_RE.match(line)
    if match:
        base, frac, zone = match.groups()
        zone = '+00:00' if zone == 'Z' else zone
        when = datetime.datetime.strptime(base + zone.replace(':', ''), '%Y-%m-%dT%H:%M:%S%z')
        return when.timestamp() + (float('0.' + frac) if frac else 0.0)
    return None


def _first(lines: Iterable[str]) -> Optional[Tuple[float, str]]:
    for line in lines:
        if not isinstance(line, str) or not ERROR_RE.search(line):
            continue
        when = line_time(line)
        if when is not None:
            return when, line
    return None


def first_error(reports: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
    """The node whose log shows the earliest error: ``{'host', 'time', 'line'}``, or ``{}`` when no log has one.

    ``reports`` are ``{'host': name, 'lines': [...]}``, lines oldest first, each starting with its time.

    >>> first_error([{'host': 'h', 'lines': ['1700000010.0 h vllm[1]: ERROR lost rank 1']},
    ...              {'host': 'w', 'lines': ['1700000002.0 w vllm[2]: ValueError: bad']}])['host']
    'w'
    """
    best = {}  # type: Dict[str, Any]
    for report in reports or []:
        if not isinstance(report, Mapping):
            continue
        found = _first(report.get('lines') or [])
        if found and (not best or found[0] < best['time']):
            best = {'host': report.get('host'), 'time': found[0], 'line': found[1]}
    return best


def strip_times(lines: List[str]) -> List[str]:
    """The lines without their leading time (for a message)."""
    out = []
    for line in lines:
        match = _UNIX_RE.match(line) or _RFC3339_RE.match(line)
        out.append(line[match.end():] if match else line)
    return out


_STATE_RE = re.compile(r'([A-Za-z]+)=(\S*)')
_EPOCH_RE = re.compile(r'^@(\d+(?:\.\d+)?)$')
_STARTED_RE = re.compile(r'^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$')


def unit_state(text: str) -> Dict[str, str]:
    """``KEY=value`` pairs of a node's state line (``systemctl show`` properties, ``docker inspect`` fields).

    >>> unit_state('ActiveState=active SubState=running MainPID=12 ExecMainStartTimestamp=@1700000000 Running=true')['MainPID']
    '12'
    """
    return dict(_STATE_RE.findall(text or ''))


def _epoch(value: str) -> Optional[float]:
    """Epoch seconds of ``@1700000000`` (systemd --timestamp=unix) or RFC 3339 (docker's StartedAt); None otherwise.

    >>> _epoch('@1700000000'), _epoch('2023-11-14T22:13:20.123456789Z'), _epoch('')
    (1700000000.0, 1700000000.123456, None)
    """
    match = _EPOCH_RE.match(value or '')
    if match:
        return float(match.group(1))
    match = _STARTED_RE.match(value or '')
    if not match or match.group(1).startswith('0001-'):
        return None
    base, frac, zone = match.groups()
    zone = '+00:00' if zone == 'Z' else zone
    when = datetime.datetime.strptime(base + zone.replace(':', ''), '%Y-%m-%dT%H:%M:%S%z')
    return when.timestamp() + (float('0.' + frac[:6]) if frac else 0.0)


def _started(state: Mapping[str, str]) -> Optional[float]:
    """When the rank's current process started: the container's StartedAt, else the unit's main process."""
    if 'StartedAt' in state:
        return _epoch(state['StartedAt'])
    return _epoch(state.get('ExecMainStartTimestamp', ''))


def _clock(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime('%H:%M:%S UTC')


def lost_ranks(reports: Iterable[Mapping[str, Any]], head: str) -> List[Dict[str, Any]]:
    """The worker ranks the head's engine lost: ``[{'host', 'rank', 'why'}]``, in the reports' order.

    ``reports`` are ``{'host', 'rank', 'state'}``, ``state`` a node's state line (``unit_state``). A worker is gone
    when its unit is not active, its container does not run (container kind), it has no main process (venv kind),
    or its process started after the head's: the head's engine formed with a process that is no more.

    >>> head = {'host': 'h', 'rank': 0, 'state': 'ActiveState=active MainPID=5 ExecMainStartTimestamp=@1700000100'}
    >>> lost_ranks([head, {'host': 'w', 'rank': 1, 'state': 'ActiveState=inactive SubState=dead Result=success MainPID=0'}], 'h')
    [{'host': 'w', 'rank': 1, 'why': 'its unit is inactive (dead, result success)'}]
    >>> lost_ranks([head, {'host': 'w', 'rank': 1, 'state': 'ActiveState=active MainPID=9 ExecMainStartTimestamp=@1700000160'}], 'h')[0]['why']
    "its rank's process started at 22:16:00 UTC, after the head's (22:15:00 UTC): the head's engine lost the one it formed with"
    >>> lost_ranks([head, {'host': 'w', 'rank': 1, 'state': 'ActiveState=active MainPID=9 ExecMainStartTimestamp=@1700000000'}], 'h')
    []
    """
    reports = [r for r in reports or [] if isinstance(r, Mapping)]
    head_state = next((unit_state(r.get('state', '')) for r in reports if r.get('host') == head), {})
    head_started = _started(head_state)
    out = []  # type: List[Dict[str, Any]]
    for report in reports:
        if report.get('host') == head:
            continue
        state = unit_state(report.get('state', ''))
        started = _started(state)
        why = None
        if not state:
            why = 'its state could not be read (%s)' % ((report.get('state') or 'unreachable').strip()[:120])
        elif state.get('ActiveState', 'active') != 'active':
            why = 'its unit is %s (%s, result %s)' % (state.get('ActiveState'), state.get('SubState', '?'), state.get('Result', '?'))
        elif state.get('Running') == 'false':
            why = 'its container does not run'
        elif 'StartedAt' not in state and state.get('MainPID') in ('0', ''):
            why = "its rank's process is gone (no main process)"
        elif started is not None and head_started is not None and started > head_started:
            why = "its rank's process started at %s, after the head's (%s): the head's engine lost the one it formed with" % (
                _clock(started), _clock(head_started))
        if why:
            out.append({'host': report.get('host'), 'rank': report.get('rank'), 'why': why})
    return out
