# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which rank's log shows the first error (pure functions, standard library only, never imports ``ansible``).

A failed health check on the head gathers every node's last log lines (``journalctl -o short-unix`` for the
venv kind, ``docker logs --timestamps`` for the container kind). Seed 003: "The head lost a TP worker ...
Look at the OTHER node's memory and logs; the root cause is almost always there." ``first_error`` finds the
earliest error line across the nodes, so the message can name the node where it started.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

__all__ = ['ERROR_RE', 'line_time', 'first_error']

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
