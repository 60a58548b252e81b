# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planning and reading rsync transfers of a checkpoint (stdlib only, pure functions).

A checkpoint is a few dozen multi-GB blobs: one rsync stream is bound by one
core (ssh cipher, rsync checksums), so the blobs are split over several
streams, balanced by size, and a last pass copies the rest of the tree
(snapshots/ symlinks, refs/) once the blobs are there::

    plan_streams([("blobs/a", 5), ("blobs/b", 3), ("blobs/c", 3)], 2)
    -> [["blobs/a"], ["blobs/b", "blobs/c"]]

``rsync --stats`` output read by ``parse_stats``::

    Number of files: 60 (reg: 51, dir: 5, link: 4)
    Number of regular files transferred: 48
    Total file size: 4,012,345,678 bytes
    Total transferred file size: 4,012,345,678 bytes
    Literal data: 4,012,345,678 bytes
    Matched data: 0 bytes
    Total bytes sent: 4,013,000,000
    Total bytes received: 1,234
"""

from __future__ import annotations

import re

SSH_CIPHER = "aes128-gcm@openssh.com"


AUTO_STREAMS_MAX = 8


def stream_count(requested, cores, files):
    """How many parallel streams: ``requested`` (0 = one per core, at most 8: beyond that the disks, not
    the cores, bound a checkpoint copy), at most one per file, at least 1."""
    wanted = int(requested) if int(requested) > 0 else min(int(cores or 1), AUTO_STREAMS_MAX)
    return max(1, min(wanted, len(files))) if files else 1


def plan_streams(files, streams):
    """Split ``[(path, size), ...]`` into ``streams`` lists of paths with near-equal byte totals
    (largest first onto the lightest stream); empty lists are dropped, order within a list is by path."""
    bins = [[0, []] for dummy in range(max(1, int(streams)))]
    for path, size in sorted(files, key=lambda item: (-int(item[1]), item[0])):
        lightest = min(bins, key=lambda b: b[0])
        lightest[0] += int(size)
        lightest[1].append(path)
    return [sorted(paths) for _total, paths in bins if paths]


def ssh_command(key, known_hosts, cipher=SSH_CIPHER, connect_timeout=15, port=22, ssh="ssh"):
    """The ``-e`` value for rsync over ssh: the transfer key only, pinned host keys, the seeds'
    cipher, no compression, a connect timeout and keep-alives so a dead peer is noticed::

        ssh -i KEY -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes
            -o UserKnownHostsFile=KNOWN -o ConnectTimeout=15 -o ServerAliveInterval=15
            -o ServerAliveCountMax=4 -c aes128-gcm@openssh.com -o Compression=no -p 22
    """
    parts = [ssh, "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=%s" % known_hosts,
             "-o", "ConnectTimeout=%d" % int(connect_timeout), "-o", "ServerAliveInterval=15",
             "-o", "ServerAliveCountMax=4"]
    if cipher:
        parts += ["-c", cipher]
    parts += ["-o", "Compression=no", "-p", str(int(port))]
    return " ".join(parts)


def rsync_argv(src, dest, io_timeout, files_from=None, ignore_times=False, ssh=None, bwlimit=0,
               contimeout=15, rsync="rsync", dirs_only=False):
    """One rsync invocation: ``-a --partial`` (an interrupted copy keeps its partial file and the next
    run resumes from it), no compression, ``--timeout`` so a silent peer ends it, ``--stats`` and
    ``-i`` to report what moved. ``dest`` ``rsync://...`` means the daemon transport.

    ``dirs_only``: the directories alone (``--include=*/ --exclude=*``), the pass that runs before the
    parallel streams, so that no two streams race to create the same directory on the worker (behind
    rrsync the loser fails with "mkdir ... File exists", rsync exit 11)."""
    argv = [rsync, "-a", "--partial", "--no-compress", "--timeout=%d" % int(io_timeout), "--stats",
            "--itemize-changes"]
    if dest.startswith("rsync://"):
        argv.append("--contimeout=%d" % int(contimeout))
    elif ssh:
        argv += ["-e", ssh]
    if ignore_times:
        argv.append("--ignore-times")
    if bwlimit:
        argv.append("--bwlimit=%d" % int(bwlimit))
    if files_from:
        argv.append("--files-from=%s" % files_from)
    if dirs_only:
        argv += ["--include=*/", "--exclude=*"]
    argv += [src.rstrip("/") + "/", dest.rstrip("/") + "/"]
    return argv


_STATS = {
    "files_transferred": r"Number of regular files transferred:\s*([\d,.]+)",
    "total_size": r"Total file size:\s*([\d,.]+)",
    "transferred_size": r"Total transferred file size:\s*([\d,.]+)",
    "literal_data": r"Literal data:\s*([\d,.]+)",
    "matched_data": r"Matched data:\s*([\d,.]+)",
    "bytes_sent": r"Total bytes sent:\s*([\d,.]+)",
    "bytes_received": r"Total bytes received:\s*([\d,.]+)",
}
_ITEM = re.compile(r"^[<>ch.*][fdLDS][.+?a-zA-Z]{9,10} ")


def _number(text):
    return int(re.sub(r"[,.]", "", text))


def parse_stats(text):
    """``rsync --stats --itemize-changes`` output -> ``{"files_transferred": 48, "literal_data": ..., "items": 51}``
    (keys missing from the output are 0; ``items`` counts the itemized change lines)."""
    stats = {}
    for key, pattern in _STATS.items():
        match = re.search(pattern, text or "")
        stats[key] = _number(match.group(1)) if match else 0
    stats["items"] = sum(1 for line in (text or "").splitlines() if _ITEM.match(line))
    return stats


def merge_stats(many):
    """Sum the stats of several streams."""
    total = {}
    for stats in many:
        for key, value in stats.items():
            total[key] = total.get(key, 0) + int(value)
    return total
