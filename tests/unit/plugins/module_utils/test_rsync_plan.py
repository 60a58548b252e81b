# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/rsync_plan.py (stream planning, argv, --stats parsing)."""

from __future__ import annotations

import subprocess

from ansible_collections.dgxspark.cluster.plugins.module_utils import rsync_plan as rp

STATS = """\
>f+++++++++ blobs/aaaa
cL+++++++++ snapshots/x/model.safetensors -> ../../blobs/aaaa
.d..t...... snapshots/x/

Number of files: 60 (reg: 51, dir: 5, link: 4)
Number of created files: 2 (reg: 1, link: 1)
Number of regular files transferred: 48
Total file size: 4,012,345,678 bytes
Total transferred file size: 4,012,345,678 bytes
Literal data: 4,000,000,000 bytes
Matched data: 12,345,678 bytes
File list size: 0
Total bytes sent: 4,013,000,000
Total bytes received: 1,234

sent 4,013,000,000 bytes  received 1,234 bytes  270,000,000.00 bytes/sec
"""


def test_stream_count():
    assert rp.stream_count(0, 2, [1, 2, 3]) == 2
    assert rp.stream_count(4, 2, [1, 2, 3]) == 3
    assert rp.stream_count(0, None, [1]) == 1
    assert rp.stream_count(3, 8, []) == 1
    assert rp.stream_count(0, 20, list(range(48))) == 8
    assert rp.stream_count(12, 20, list(range(48))) == 12


def test_plan_streams_balances_bytes():
    files = [("blobs/a", 5), ("blobs/b", 3), ("blobs/c", 3), ("blobs/d", 1)]
    plan = rp.plan_streams(files, 2)
    totals = sorted(sum(dict(files)[p] for p in group) for group in plan)
    assert totals == [6, 6]
    assert sorted(p for group in plan for p in group) == ["blobs/a", "blobs/b", "blobs/c", "blobs/d"]
    assert rp.plan_streams([("blobs/a", 1)], 4) == [["blobs/a"]]


def test_ssh_command_pins_host_keys_and_the_seeds_cipher():
    cmd = rp.ssh_command("/k", "/kh")
    assert "-o StrictHostKeyChecking=yes" in cmd and "-o UserKnownHostsFile=/kh" in cmd
    assert "-c aes128-gcm@openssh.com" in cmd and "-o Compression=no" in cmd
    assert "StrictHostKeyChecking=no" not in cmd
    assert "-c " not in rp.ssh_command("/k", "/kh", cipher="")


def test_rsync_argv_ssh_and_daemon():
    argv = rp.rsync_argv("/src/repo", "u@10.0.0.2:repo", 300, files_from="/tmp/list", ignore_times=True,
                         ssh="ssh -i k", bwlimit=100)
    assert argv[:3] == ["rsync", "-a", "--partial"]
    assert "--timeout=300" in argv and "--no-compress" in argv and "--ignore-times" in argv
    assert "--bwlimit=100" in argv and "--files-from=/tmp/list" in argv
    assert argv[argv.index("-e") + 1] == "ssh -i k"
    assert argv[-2:] == ["/src/repo/", "u@10.0.0.2:repo/"]
    daemon = rp.rsync_argv("/src/repo/", "rsync://u@10.0.0.2:8873/checkpoint/", 60)
    assert "-e" not in daemon and "--contimeout=15" in daemon
    assert daemon[-1] == "rsync://u@10.0.0.2:8873/checkpoint/"
    assert "--inplace" not in daemon


def test_parse_stats():
    stats = rp.parse_stats(STATS)
    assert stats["files_transferred"] == 48
    assert stats["literal_data"] == 4000000000 and stats["matched_data"] == 12345678
    assert stats["bytes_sent"] == 4013000000 and stats["bytes_received"] == 1234
    assert stats["items"] == 3
    assert rp.parse_stats("")["items"] == 0


def test_merge_stats():
    total = rp.merge_stats([{"items": 1, "literal_data": 5}, {"items": 2, "literal_data": 7}])
    assert total == {"items": 3, "literal_data": 12}


def test_rsync_argv_dirs_only_creates_the_directories_alone(tmp_path):
    """The pass before the parallel streams: every directory, no file (run for real with the local rsync)."""
    src = tmp_path / "src"
    (src / "blobs").mkdir(parents=True)
    (src / "snapshots" / "abc").mkdir(parents=True)
    (src / "blobs" / "f00d").write_text("weights")
    (src / "snapshots" / "abc" / "model.safetensors").symlink_to("../../blobs/f00d")
    argv = rp.rsync_argv(str(src), str(tmp_path / "dest"), 30, dirs_only=True)
    assert argv[-4:-2] == ["--include=*/", "--exclude=*"]
    subprocess.run(argv, check=True, capture_output=True)
    made = sorted(str(p.relative_to(tmp_path / "dest")) for p in (tmp_path / "dest").rglob("*"))
    assert made == ["blobs", "snapshots", "snapshots/abc"]
