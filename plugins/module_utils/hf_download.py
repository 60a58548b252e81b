# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint download as a transient systemd unit, and the bounded wait on it (stdlib only).

``hf download`` runs as ``dgxspark-checkpoint-download.service`` (``systemd-run``,
``RemainAfterExit=yes``, ``RuntimeMaxSec`` = the download timeout), so it
outlives the play that started it and there is never more than one: systemd
refuses a second unit of the same name, and before starting one every other
``hf download`` into the same cache is found from ``/proc`` and stopped (an
interrupted run's unit, or the asynchronous job of an older release of the role).

The wait is one loop per call (no recursion): every ``poll`` seconds the bytes
under ``blobs/`` are measured and a progress line is written::

    2026-12-01T15:20:03Z 12.3 GB of 166.9 GB (7.4%), 105.0 MB/s, 24 min 32 s left

The rate is taken over a sliding window of samples (``window`` seconds, at
least the last two samples), which callers carry from one call to the next.
The unit's end is read from ``systemctl show``::

    ActiveState=active
    SubState=exited
    Result=success
    ExecMainStatus=0
    MainPID=0
"""

from __future__ import annotations

import os
import re
import signal
import stat
import time

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache, safe_dirs

UNIT = "dgxspark-checkpoint-download"
SHOW_PROPERTIES = ("ActiveState", "SubState", "Result", "ExecMainStatus", "ExecMainCode", "MainPID",
                   "Description", "LoadState", "ActiveEnterTimestamp")
_HF_NAMES = ("hf", "huggingface-cli")


def parse_show(text):
    """``systemctl show -p ...`` output (``Key=value`` lines) -> dict of strings."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def unit_running(show):
    """Is the unit's process still running (not exited, not failed, not gone)?"""
    return show.get("ActiveState") in ("active", "activating", "deactivating", "reloading") \
        and show.get("SubState") not in ("exited", "dead", "failed")


def unit_outcome(show):
    """``(finished, rc, reason)`` of a unit that no longer runs its process.

    ``active/exited`` + ``ExecMainStatus=0`` -> ``(True, 0, "success")``; ``failed`` +
    ``Result=timeout`` -> ``(True, None, "timeout")``; an unknown unit -> ``(True, None, "not-found")``.
    """
    if unit_running(show):
        return False, None, "running"
    if show.get("LoadState") == "not-found" or not show:
        return True, None, "not-found"
    result = show.get("Result") or "unknown"
    try:
        status = int(show.get("ExecMainStatus") or "")
    except ValueError:
        status = None
    if result == "success" and status == 0:
        return True, 0, "success"
    return True, status if status not in (None, 0) or result == "exit-code" else None, result


def is_downloader(argv, cache_dir):
    """Is this argv an ``hf download`` into ``cache_dir``? (``hf`` directly, through its venv's python,
    or behind ``runuser -u <user> --``; ``--cache-dir <dir>`` or ``--cache-dir=<dir>``.)"""
    names = [os.path.basename(a) for a in argv]
    for index, name in enumerate(names[:-1]):
        if name in _HF_NAMES and argv[index + 1] == "download":
            break
    else:
        return False
    cache = os.path.normpath(cache_dir)
    for index, arg in enumerate(argv):
        if arg == "--cache-dir" and index + 1 < len(argv) and os.path.normpath(argv[index + 1]) == cache:
            return True
        if arg.startswith("--cache-dir=") and os.path.normpath(arg.split("=", 1)[1]) == cache:
            return True
    return False


def read_argv(pid, proc="/proc"):
    """``/proc/<pid>/cmdline`` as argv ([] when the process is gone or is a kernel thread)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def find_downloaders(cache_dir, proc="/proc", exclude=()):
    """Every running ``hf download`` into ``cache_dir``: ``[{"pid": 4242, "argv": [...]}]``, by pid."""
    found = []
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) in exclude:
            continue
        argv = read_argv(name, proc)
        if argv and is_downloader(argv, cache_dir):
            found.append({"pid": int(name), "argv": argv})
    return sorted(found, key=lambda p: p["pid"])


def stop_pids(pids, grace=10.0, alive=None, kill=os.kill, sleep=time.sleep, clock=time.monotonic):
    """SIGTERM every pid, wait up to ``grace`` seconds, SIGKILL what is left; returns the pids still alive."""
    alive = alive or (lambda pid: os.path.exists("/proc/%d" % pid))
    pending = [p for p in pids if alive(p)]
    for pid in pending:
        try:
            kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = clock() + grace
    while pending and clock() < deadline:
        sleep(0.2)
        pending = [p for p in pending if alive(p)]
    for pid in pending:
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if pending:
        sleep(0.5)
    return [p for p in pending if alive(p)]


def systemd_run_argv(unit, argv, user, environment, timeout, log_path, description, workdir=None):
    """The ``systemd-run`` command line that starts the download unit (no secret in it: the token is a file)."""
    cmd = ["systemd-run", "--unit=%s" % unit, "--description=%s" % description, "--uid=%s" % user,
           "--gid=%s" % user, "--property=RemainAfterExit=yes",
           "--property=RuntimeMaxSec=%d" % int(timeout),
           "--property=StandardOutput=truncate:%s" % log_path,
           "--property=StandardError=append:%s" % log_path]
    if workdir:
        cmd.append("--working-directory=%s" % workdir)
    for key in sorted(environment or {}):
        cmd.append("--setenv=%s=%s" % (key, environment[key]))
    return cmd + ["--"] + list(argv)


# --------------------------------------------------------------------------- progress


def window_rate(samples, window):
    """Bytes/s over the samples (``[[time, done], ...]``, oldest first) within the last ``window``
    seconds, using at least the last two samples; None with fewer than two."""
    if len(samples) < 2:
        return None
    last_t, last_d = samples[-1]
    first = samples[-2]
    for sample in reversed(samples[:-1]):
        if last_t - sample[0] > window:
            break
        first = sample
    if last_t <= first[0]:
        return None
    return max(0.0, (last_d - first[1]) / float(last_t - first[0]))


def trim(samples, window, most=64):
    """Keep the samples a rate over ``window`` seconds needs: the newest, at most one older than the window,
    and in between at most ``most`` spaced at least window/most apart (a 10 ms poll keeps the list short)."""
    if not samples:
        return []
    last_t = samples[-1][0]
    older = [s for s in samples if last_t - s[0] > window]
    inside = [s for s in samples[:-1] if last_t - s[0] <= window]
    spaced = []
    for sample in inside:
        if not spaced or sample[0] - spaced[-1][0] >= window / float(most):
            spaced.append(sample)
    return ([older[-1]] if older else []) + spaced[-most:] + [samples[-1]]


def line(done, total, rate, now):
    """One progress line: ``<UTC time> <done> of <total> (<pct>), <rate>, <time left>``."""
    percent = (100.0 * done / total) if total else 0.0
    eta = (max(0, total - done) / rate) if rate else None
    text = "%s of %s (%.1f%%), %s, %s" % (
        hf_cache.human_bytes(done), hf_cache.human_bytes(total), percent,
        ("%s/s" % hf_cache.human_bytes(rate)) if rate is not None else "rate pending",
        ("%s left" % hf_cache.human_duration(eta)) if eta is not None else "time left unknown")
    return {"done": done, "total": total, "percent": round(percent, 1), "rate": rate, "eta": eta,
            "time": now, "msg": text}


def wait(repo_dir, total, poll, budget, status, samples=None, window=60.0, write=None,
         clock=time.time, sleep=time.sleep, measure=hf_cache.blob_bytes):
    """Wait on the download for at most ``budget`` seconds: every ``poll`` seconds one sample and one
    line (``write(text)``), until ``status()`` says the unit ended.

    ``status()`` -> ``(finished, rc, reason)`` (see ``unit_outcome``). Returns::

        {"finished": bool, "exit_status": int|None, "reason": str, "polls": n, "samples": [[t, done], ...],
         "done", "total", "percent", "rate", "eta", "time", "msg"}
    """
    samples = [list(s) for s in (samples or [])]
    started = clock()
    polls = 0
    finished, rc, reason = False, None, "running"
    sample = None
    while True:
        sleep(max(0.0, float(poll)))
        finished, rc, reason = status()
        now = clock()
        done = measure(repo_dir)
        samples = trim(samples + [[now, done]], window)
        sample = line(done, total, window_rate(samples, window), now)
        polls += 1
        if write:
            write("%s %s" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), sample["msg"]))
        if finished or now - started + float(poll) > budget:
            break
    sample.update(finished=finished, exit_status=rc, reason=reason, polls=polls, samples=samples)
    return sample


def manifest_bytes(repo_dir, blobs):
    """Bytes a download of these blob names has written: each finished ``blobs/<name>``, else its unfinished
    ``blobs/<name>.incomplete`` or ``blobs/<name>.<suffix>.incomplete`` (huggingface_hub 1.x/2.x); blobs of
    other revisions in the same repo folder do not count. One directory scan.

    Of several unfinished files of one blob only the newest counts: huggingface_hub 2.x writes each download
    into a new process-unique file and never resumes an older one, which a stopped downloader left."""
    wanted = set(blobs)
    finished = {}
    partial = {}
    try:
        with os.scandir(os.path.join(repo_dir, "blobs")) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue
                name = entry.name
                if name in wanted:
                    finished[name] = entry.stat(follow_symlinks=False).st_size
                elif name.endswith(".incomplete") and name.split(".", 1)[0] in wanted:
                    base = name.split(".", 1)[0]
                    info = entry.stat(follow_symlinks=False)
                    partial[base] = max(partial.get(base, (0.0, 0)), (info.st_mtime, info.st_size))
    except OSError:
        return 0
    return sum(finished.values()) + sum(size for base, (_mtime, size) in partial.items() if base not in finished)


def stale_partials(repo_dir):
    """Unfinished files of blobs that are finished now: ``blobs/<etag>.incomplete`` or ``blobs/<etag>.<suffix>.incomplete``
    next to ``blobs/<etag>`` (a stopped downloader's partial file: huggingface_hub 2.x never resumes one, the next
    downloader fetched the blob from its start into a file of its own). Safe to remove: the blob they were for is complete."""
    base = os.path.join(repo_dir, "blobs")
    try:
        names = set(os.listdir(base))
    except OSError:
        return []
    return sorted(os.path.join(base, n) for n in names
                  if n.endswith(".incomplete") and n.split(".", 1)[0] in names)


def remove_stale_partials(repo_dir):
    """Remove the ``stale_partials`` of ``repo_dir``; returns the names removed.

    The cache belongs to the checkpoint user, so root removes only through a descriptor of ``blobs`` opened without
    following a link (``safe_dirs``: a link on the way raises ``UnsafePath``), and only regular files: a ``blobs``
    swapped for a link to another directory between the listing and the removal is never followed.
    """
    names = [os.path.basename(path) for path in stale_partials(repo_dir)]
    if not names:
        return []
    repo_fd = safe_dirs.open_directory(repo_dir)
    try:
        blobs_fd = safe_dirs.open_child_directory(repo_fd, "blobs", os.path.join(repo_dir, "blobs"))
    finally:
        os.close(repo_fd)
    removed = []
    try:
        for name in names:
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=blobs_fd, follow_symlinks=False).st_mode):
                    continue
                os.unlink(name, dir_fd=blobs_fd)
            except OSError:
                continue
            removed.append(name)
    finally:
        os.close(blobs_fd)
    return removed


def tail(path, lines=20, limit=4000):
    """The last lines of a log file ("" when unreadable), at most ``limit`` characters."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    out = "\n".join(text.splitlines()[-lines:])
    return out[-limit:]


def redact(text, secrets):
    """``text`` with every non-empty secret replaced by ``********``."""
    for secret in secrets or ():
        if secret:
            text = text.replace(secret, "********")
    return re.sub(r"hf_[A-Za-z0-9]{20,}", "hf_********", text)
