# -*- coding: utf-8 -*-
"""plugins/module_utils/memory.py: /proc/meminfo and the largest processes, against fake /proc trees."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils import memory


def test_read_meminfo(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       126000000 kB\nMemAvailable:   122000000 kB\nCached:  5000 kB\nHugePages_Total: 0\n")
    info = memory.read_meminfo(str(path))
    assert info["MemAvailable"] == 122000000 and info["Cached"] == 5000 and info["HugePages_Total"] == 0
    assert memory.read_meminfo(str(tmp_path / "nonexistent")) == {}


def test_meminfo():
    info = memory.meminfo("MemTotal:       126000000 kB\nMemAvailable:   1048576 kB\nCached: 2097152 kB\nbad\n")
    assert info == {"MemTotal": 126000000, "MemAvailable": 1048576, "Cached": 2097152}


def test_largest_processes_and_the_report(tmp_path):
    for pid, rss, argv, comm in ((10, 262144, b"/opt/vllm/bin/python\0-m\0vllm\0", "python"),
                                 (11, 1024, b"sshd\0", "sshd"), (12, 0, b"", "kthreadd"), (13, 524288, b"", "ollama")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "statm").write_text("999 %d 0 0 0 0 0\n" % rss)
        (tmp_path / str(pid) / "cmdline").write_bytes(argv)
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    top = memory.largest_processes(str(tmp_path), count=2, page=4096)
    assert top == [{"pid": 13, "rss_kb": 2097152, "command": "[ollama]"},
                   {"pid": 10, "rss_kb": 1048576, "command": "/opt/vllm/bin/python -m vllm"}]
    line = memory.report({"MemAvailable": 1048576, "MemTotal": 126000000 // 1024 * 1024, "Cached": 100 * 1048576,
                          "Dirty": 1048576}, top, 119808)
    assert line.startswith("MemAvailable 1.0 GiB of MemTotal ") and "expected at least 117.0 GiB" in line
    assert "page cache (Cached) 100.0 GiB, of it dirty 1.0 GiB" in line and "[ollama] (pid 13) 2.0 GiB" in line


def test_decide_checks_only_before_a_start():
    """The ~117 GiB check is made with the unit stopped (inactive, failed, unknown) or with no unit named; skipped while
    it runs (never stopped for it) and with a minimum of 0."""
    for state in ("inactive", "failed", "", None):
        assert memory.decide(119808, state, "dgxspark-vllm.service") == (True, "")
    for state in ("active", "activating", "reloading", "deactivating", "active\n"):
        check, reason = memory.decide(119808, state, "dgxspark-vllm.service")
        assert check is False and reason.startswith("dgxspark-vllm.service is %s: vLLM holds the memory" % state.strip())
    assert memory.decide(0, "inactive") == (False, "the minimum is 0 (the check is disabled)")
    assert memory.decide(0, "active")[0] is False and memory.decide(-1, None)[0] is False


def test_files_under_walks_directories_and_follows_no_link(tmp_path):
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "b").write_bytes(b"x" * 10)
    (tmp_path / "blobs" / "a").write_bytes(b"y")
    (tmp_path / "blobs" / "sub").mkdir()
    (tmp_path / "blobs" / "sub" / "c").write_bytes(b"z")
    (tmp_path / "outside").write_bytes(b"o")
    (tmp_path / "blobs" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "blobs" / "dirlink").symlink_to(tmp_path)
    found = memory.files_under([str(tmp_path / "blobs"), str(tmp_path / "outside"), str(tmp_path / "gone")])
    assert found == [str(tmp_path / "blobs" / n) for n in ("a", "b", "sub/c")] + [str(tmp_path / "outside")]


def test_report_names_the_resident_files():
    info = {"MemAvailable": 1048576, "MemTotal": 2097152, "Cached": 1048576, "Dirty": 0}
    assert ", of it the checkpoint's files 0.5 GiB; largest" in memory.report(info, [], 1, resident=512 * 1048576)
    assert "checkpoint's files" not in memory.report(info, [], 1)
