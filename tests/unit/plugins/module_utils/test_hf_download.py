# -*- coding: utf-8 -*-
"""plugins/module_utils/hf_download.py: the download unit's outcome, finding leftover downloaders,
the bounded wait with a progress line per poll, and the rate window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_download as hd

CACHE = "/var/lib/dgxspark/huggingface/hub"
HF = ["/opt/dgxspark/hf-tools/bin/hf", "download", "deepseek-ai/DeepSeek-V4-Flash-0731", "--revision", "9" * 40,
      "--cache-dir", CACHE]


def test_parse_show_and_outcomes():
    show = hd.parse_show("ActiveState=active\nSubState=exited\nResult=success\nExecMainStatus=0\nMainPID=0\n")
    assert not hd.unit_running(show) and hd.unit_outcome(show) == (True, 0, "success")
    running = hd.parse_show("ActiveState=active\nSubState=running\nMainPID=42\n")
    assert hd.unit_running(running) and hd.unit_outcome(running) == (False, None, "running")
    failed = hd.parse_show("ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\n")
    assert hd.unit_outcome(failed) == (True, 1, "exit-code")
    timeout = hd.parse_show("ActiveState=failed\nSubState=failed\nResult=timeout\nExecMainStatus=15\n")
    assert hd.unit_outcome(timeout)[0] and hd.unit_outcome(timeout)[1] != 0 and hd.unit_outcome(timeout)[2] == "timeout"
    gone = hd.parse_show("LoadState=not-found\nActiveState=inactive\nSubState=dead\n")
    assert hd.unit_outcome(gone) == (True, None, "not-found")


@pytest.mark.parametrize("argv, expected", [
    (HF, True),
    (["/opt/dgxspark/hf-tools/bin/python3", "/opt/dgxspark/hf-tools/bin/hf"] + HF[1:], True),
    (["runuser", "-u", "dgxspark-ckpt", "--"] + HF, True),
    (HF[:-2] + ["--cache-dir=" + CACHE + "/"], True),
    (HF[:-1] + ["/elsewhere"], False),            # another cache: not ours
    (["/usr/bin/hf", "upload", "x", "--cache-dir", CACHE], False),
    (["vim", "hf", "download", "--cache-dir", CACHE + "x"], False),
])
def test_is_downloader(argv, expected):
    assert hd.is_downloader(argv, CACHE) is expected


def test_find_downloaders_reads_proc(tmp_path):
    for pid, argv in ((10, HF), (11, ["sleep", "100"]), (12, ["runuser", "-u", "x", "--"] + HF)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "self").mkdir()
    found = hd.find_downloaders(CACHE, proc=str(tmp_path), exclude=(12,))
    assert [f["pid"] for f in found] == [10] and found[0]["argv"] == HF


def test_find_downloaders_finds_a_real_process(tmp_path):
    """A real process whose argv is an hf download into the cache is found, then stopped for real."""
    script = tmp_path / "hf"
    script.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script), "download", "r/x", "--cache-dir", str(tmp_path)])
    try:
        deadline = time.time() + 5
        found = []
        while time.time() < deadline and not found:
            found = hd.find_downloaders(str(tmp_path))
            time.sleep(0.05)
        assert [f["pid"] for f in found] == [proc.pid]

        def alive(pid):
            return proc.poll() is None
        assert hd.stop_pids([proc.pid], grace=5, alive=alive) == []
        assert proc.returncode == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stop_pids_escalates_to_sigkill():
    sent = []
    state = {"alive": True}

    def kill(pid, sig):
        sent.append(sig)
        if sig == signal.SIGKILL:
            state["alive"] = False
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
    left = hd.stop_pids([7], grace=1.0, alive=lambda pid: state["alive"], kill=kill, sleep=sleep, clock=lambda: now[0])
    assert sent == [signal.SIGTERM, signal.SIGKILL] and left == []


def test_systemd_run_argv_has_no_secret_and_the_limits():
    cmd = hd.systemd_run_argv("u", HF, "ckpt", {"HF_TOKEN_PATH": "/h/token", "HF_HUB_OFFLINE": "0"}, 100,
                              "/h/download.log", "dl x@y", workdir="/h")
    assert cmd[:2] == ["systemd-run", "--unit=u"]
    assert "--property=RemainAfterExit=yes" in cmd and "--property=RuntimeMaxSec=100" in cmd
    assert "--setenv=HF_TOKEN_PATH=/h/token" in cmd and cmd[cmd.index("--") + 1:] == HF


def test_window_rate_and_trim():
    samples = [[0.0, 0], [10.0, 100], [20.0, 300], [30.0, 600]]
    assert hd.window_rate(samples, 15) == pytest.approx((600 - 300) / 10.0)
    assert hd.window_rate(samples, 100) == pytest.approx(20.0)
    assert hd.window_rate(samples[:1], 60) is None
    assert hd.trim(samples, 15) == [[10.0, 100], [20.0, 300], [30.0, 600]]
    many = [[i * 0.01, i] for i in range(10000)]
    kept = hd.trim(many, 60.0)
    assert len(kept) <= 66 and kept[-1] == many[-1] and hd.window_rate(kept, 60.0) == pytest.approx(100.0)


def test_wait_writes_a_line_per_poll_until_the_unit_ends(tmp_path):
    """1,200 polls in one call (a fake clock): one line each, the rate and time left from the window."""
    now = [1000.0]
    done = [0]
    lines = []

    def sleep(seconds):
        now[0] += seconds
        done[0] = min(10_000_000, done[0] + 8_000)

    def status():
        return (True, 0, "success") if done[0] >= 10_000_000 else (False, None, "running")
    result = hd.wait(str(tmp_path), 10_000_000, 0.01, 3600, status, window=1.0, write=lines.append,
                     clock=lambda: now[0], sleep=sleep, measure=lambda _repo: done[0])
    assert result["finished"] and result["exit_status"] == 0 and result["polls"] == 1250 == len(lines)
    assert result["percent"] == 100.0
    middle = lines[600]
    assert " of 10.0 MB (" in middle and "800.0 KB/s" in middle and " left" in middle


def test_wait_returns_after_its_budget_with_the_window(tmp_path):
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
    result = hd.wait(str(tmp_path), 100, 1.0, 5.0, lambda: (False, None, "running"), samples=[[-1.0, 0]],
                     clock=lambda: now[0], sleep=sleep, measure=lambda _repo: 50)
    assert not result["finished"] and result["polls"] == 5 and result["samples"][-1] == [5.0, 50]


def test_manifest_bytes_counts_finished_and_incomplete_blobs_of_the_revision_only(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "a").write_bytes(b"x" * 10)
    (blobs / "b.incomplete").write_bytes(b"x" * 5)
    (blobs / "c.1b8b7324.incomplete").write_bytes(b"x" * 7)     # huggingface_hub 2.x names them so
    (blobs / "old-revision-blob").write_bytes(b"x" * 1000)
    assert hd.manifest_bytes(str(tmp_path), ["a", "b", "c"]) == 22


def test_manifest_bytes_counts_the_newest_partial_of_a_blob_only(tmp_path):
    # a stopped downloader's partial file stays beside the new downloader's (huggingface_hub 2.x never resumes it)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    stale = blobs / "c.1b8b7324.incomplete"
    stale.write_bytes(b"x" * 600)
    os.utime(stale, (1000, 1000))
    (blobs / "c.5d41402a.incomplete").write_bytes(b"x" * 50)
    assert hd.manifest_bytes(str(tmp_path), ["c"]) == 50


def test_redact_and_tail(tmp_path):
    log = tmp_path / "log"
    log.write_text("".join("line %d\n" % i for i in range(50)) + "401 token hf_abcdefghijklmnopqrstuvwxyz\n")
    text = hd.redact(hd.tail(str(log), lines=3), ["secret"])
    assert text.splitlines()[0] == "line 48" and "hf_********" in text and "abcdefghij" not in text
    assert hd.tail(str(tmp_path / "missing")) == ""
    assert os.path.exists(str(log))


def test_stale_partials_are_only_those_of_finished_blobs(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for name in ("a", "a.1b8b7324.incomplete", "a.incomplete", "b.d6dc891c.incomplete", "c"):
        (blobs / name).write_bytes(b"x")
    assert [os.path.basename(p) for p in hd.stale_partials(str(tmp_path))] == ["a.1b8b7324.incomplete", "a.incomplete"]
    assert hd.stale_partials(str(tmp_path / "none")) == []
