# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What holds a node's memory, read from /proc (stdlib only): for the ~117 GiB check before serving.

``/proc/meminfo`` (kB)::

    MemTotal:       126000000 kB
    MemAvailable:   122000000 kB
    Cached:           5000000 kB
    Dirty:              12000 kB

``/proc/<pid>/statm`` (pages: size resident shared ...)::

    1234567 456789 1234 1 0 345678 0

The largest processes by resident set, with their command (``/proc/<pid>/cmdline``,
NUL-separated, or ``comm`` for a kernel thread).

The check is made only while the serving unit does not run (``systemctl show -p ActiveState``:
``inactive``, ``failed``, or an unknown unit): while it runs, vLLM itself holds the memory, and a
unit is never stopped to measure (``decide``).
"""

from __future__ import annotations

import os


# ActiveState values of a unit whose process runs (or is starting, reloading, stopping).
RUNNING_STATES = ("active", "activating", "reloading", "deactivating", "refreshing")


def decide(minimum_mb, unit_state=None, unit=""):
    """Whether the MemAvailable check is made now: ``(check, reason)``.

    ``minimum_mb`` 0 (or less) disables it; a unit in a running state skips it (vLLM holds the memory:
    the check is for the start, and the unit is never stopped for it). ``unit_state`` None: no unit to
    look at, the check is made.
    """
    if int(minimum_mb or 0) <= 0:
        return False, "the minimum is 0 (the check is disabled)"
    state = (unit_state or "").strip()
    if state in RUNNING_STATES:
        return False, "%s is %s: vLLM holds the memory, the check is for a start" % (unit or "the unit", state)
    return True, ""


def meminfo(text):
    """``/proc/meminfo`` text -> {key: kB}."""
    out = {}
    for row in (text or "").splitlines():
        key, sep, rest = row.partition(":")
        if sep and rest.split():
            try:
                out[key.strip()] = int(rest.split()[0])
            except ValueError:
                continue
    return out


def read_meminfo(path="/proc/meminfo"):
    """This node's /proc/meminfo as {key: kB} ({} when unreadable)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return meminfo(handle.read())
    except OSError:
        return {}


def largest_processes(proc="/proc", count=5, page=None):
    """The ``count`` processes with the largest resident set: ``[{"pid", "rss_kb", "command"}]``, largest first."""
    page = page or os.sysconf("SC_PAGE_SIZE")
    found = []
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        base = os.path.join(proc, name)
        try:
            with open(os.path.join(base, "statm"), encoding="ascii") as handle:
                rss_pages = int(handle.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if rss_pages <= 0:
            continue
        command = ""
        try:
            with open(os.path.join(base, "cmdline"), "rb") as handle:
                command = " ".join(p.decode("utf-8", "replace") for p in handle.read().split(b"\0") if p)
        except OSError:
            pass
        if not command:
            try:
                with open(os.path.join(base, "comm"), encoding="utf-8", errors="replace") as handle:
                    command = "[%s]" % handle.read().strip()
            except OSError:
                command = "?"
        found.append({"pid": int(name), "rss_kb": rss_pages * page // 1024, "command": command[:120]})
    found.sort(key=lambda p: (-p["rss_kb"], p["pid"]))
    return found[:count]


def report(info, processes, minimum_mb, resident=None):
    """One line naming the figures and what holds the memory (the page cache, the largest processes).
    ``resident``: bytes of given files (the checkpoint's blobs) in the page cache, named when given."""
    def gib(kb):
        return "%.1f GiB" % (kb / 1048576.0)
    procs = ", ".join("%s (pid %d) %s" % (p["command"].split(" ")[0] or "?", p["pid"], gib(p["rss_kb"]))
                      for p in processes)
    files = "" if resident is None else ", of it the checkpoint's files %s" % gib(resident // 1024)
    return ("MemAvailable %s of MemTotal %s, expected at least %s; page cache (Cached) %s, of it dirty %s%s; "
            "largest processes: %s" % (gib(info.get("MemAvailable", 0)), gib(info.get("MemTotal", 0)),
                                       gib(minimum_mb * 1024), gib(info.get("Cached", 0)), gib(info.get("Dirty", 0)),
                                       files, procs or "none readable"))


def files_under(paths):
    """Regular files at or under these paths (a directory is walked; links are not followed), sorted."""
    found = []
    for path in paths:
        if os.path.islink(path):
            continue
        if os.path.isfile(path):
            found.append(path)
            continue
        for base, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(base, d)))
            found.extend(os.path.join(base, n) for n in sorted(names)
                         if os.path.isfile(os.path.join(base, n)) and not os.path.islink(os.path.join(base, n)))
    return found
