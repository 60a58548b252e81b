# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/leftover_processes.py and free_space.py against a fake /proc and filesystem."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.module_utils import leftovers as lo
from ansible_collections.dgxspark.cluster.plugins.modules import free_space, leftover_processes
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

NET_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
CID = "c" * 64


def make_proc(root, processes, listen=()):
    """A fake procfs: processes are (pid, argv, cgroup path, socket inodes); listen is (port, inode)."""
    (root / "net").mkdir(parents=True)
    lines = ["%4d: 00000000:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %d 1 0 100 0 0 10 0"
             % (idx, port, inode) for idx, (port, inode) in enumerate(listen)]
    (root / "net" / "tcp").write_text(NET_HEADER + "\n".join(lines) + "\n")
    (root / "net" / "tcp6").write_text(NET_HEADER)
    for pid, argv, cgroup, inodes in processes:
        base = root / str(pid)
        (base / "fd").mkdir(parents=True)
        comm = (argv[0].rsplit("/", 1)[-1] if argv else "kthread")[:15]
        (base / "stat").write_text("%d (%s) S 1 %d %d 0 -1 0" % (pid, comm, pid, pid))
        (base / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (base / "cgroup").write_text("0::%s\n" % cgroup)
        for idx, inode in enumerate(inodes):
            os.symlink("socket:[%d]" % inode, str(base / "fd" / str(idx + 3)))
    return root


def run(args, commands=None, check_mode=False):
    """main() with run_command answering from ``commands`` (argv tuple prefix -> (rc, out, err)); records calls."""
    calls = []

    def run_command(self, argv, **_kwargs):
        calls.append(list(argv))
        for prefix, answer in (commands or {}).items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        return (0, "", "")

    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", side_effect=lambda name, *a, **k: "/usr/bin/" + name), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(lo, "signal_pids") as signal_pids, \
            mock.patch.object(lo, "wait_gone", return_value=[]):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            leftover_processes.main()
    return excinfo.value.args[0], calls, signal_pids


@pytest.fixture
def proc(tmp_path):
    return make_proc(tmp_path / "proc", [
        (1, ["/sbin/init"], "/init.scope", []),
        (2, [], "/", []),
        (100, ["/opt/dgxspark/vllm/bin/vllm", "serve", "m"], "/system.slice/dgxspark-vllm.service", [9001]),
        (150, ["/usr/local/bin/vllm", "serve", "m"], "/system.slice/docker-%s.scope" % CID, []),
        (200, ["/opt/old/bin/vllm", "serve", "m"], "/system.slice/old-vllm.service", [9002]),
        (300, ["ray::IDLE"], "/user.slice/user-1000.slice/session-3.scope", []),
    ], listen=[(8888, 9001), (25000, 9002)])


def test_probe_reads_only(proc):
    result, calls, signal_pids = run(dict(unit="dgxspark-vllm.service", ports=[8888, 25000], proc_root=str(proc),
                                          compose_project="dgxspark-vllm"),
                                     commands={("/usr/bin/docker", "ps"): (0, CID + "\n", ""),
                                               ("systemctl", "show"): (0, "200\n", "")})
    assert result["changed"] is False
    assert result["own_containers"] == [CID]
    assert [(f["pid"], f["action"], f["ports"]) for f in result["leftovers"]] == [(200, "unit", [25000]), (300, "signal", [])]
    assert result["remaining"] == result["leftovers"]
    assert result["stopped"] == []
    assert "pid 200 vllm (/opt/old/bin/vllm serve m) holds port 25000 in old-vllm.service" in result["summary"][0]
    assert not [c for c in calls if c[:2] == ["systemctl", "stop"]]
    signal_pids.assert_not_called()


def test_without_compose_project_the_container_is_a_leftover(proc):
    result, calls, _sig = run(dict(unit="dgxspark-vllm.service", ports=[8888], proc_root=str(proc)),
                              commands={("systemctl", "show"): (0, "200\n", "")})
    assert [(f["pid"], f["action"]) for f in result["leftovers"]] == [(150, "container"), (200, "unit"), (300, "signal")]
    assert not [c for c in calls if "ps" in c]


def test_stop_in_check_mode_changes_nothing(proc):
    result, calls, signal_pids = run(dict(unit="dgxspark-vllm.service", ports=[8888, 25000], proc_root=str(proc), stop=True),
                                     commands={("systemctl", "show"): (0, "200\n", "")}, check_mode=True)
    assert result["changed"] is True
    assert result["stopped"] == ["systemctl stop old-vllm.service", "docker stop cccccccccccc", "SIGTERM pid 300 (ray::IDLE)"]
    assert result["remaining"] == []
    assert not [c for c in calls if c[:2] == ["systemctl", "stop"] or "stop" in c[1:2]]
    signal_pids.assert_not_called()


def test_stop_units_containers_and_processes(proc):
    result, calls, signal_pids = run(dict(unit="dgxspark-vllm.service", ports=[8888, 25000], proc_root=str(proc), stop=True,
                                          stop_timeout=5),
                                     commands={("systemctl", "show"): (0, "200\n", "")})
    assert result["changed"] is True
    assert ["systemctl", "stop", "old-vllm.service"] in calls
    assert ["/usr/bin/docker", "stop", "--time", "5", CID] in calls
    signal_pids.assert_called_once()
    assert signal_pids.call_args[0][0] == [300]
    # the fake /proc does not change, so the re-scan still finds them: reported as remaining
    assert [f["pid"] for f in result["remaining"]] == [150, 200, 300]


def test_a_vllm_in_another_units_cgroup_is_signalled_not_its_unit(tmp_path):
    proc = make_proc(tmp_path / "proc", [
        (1, ["/sbin/init"], "/init.scope", []),
        (71, ["sshd: /usr/sbin/sshd -D"], "/system.slice/ssh.service", []),
        (695, ["VLLM::EngineCore", "3600"], "/system.slice/ssh.service", []),
    ])
    result, calls, signal_pids = run(dict(unit="dgxspark-vllm.service", proc_root=str(proc), stop=True),
                                     commands={("systemctl", "show"): (0, "71\n", "")})
    assert result["stopped"] == ["SIGTERM pid 695 (VLLM::EngineCor)"]
    assert not [c for c in calls if c[:2] == ["systemctl", "stop"]]
    assert signal_pids.call_args[0][0] == [695]


def test_a_stopped_leftover_unit_that_is_enabled_is_disabled_too(proc):
    result, calls, _sig = run(dict(unit="dgxspark-vllm.service", ports=[25000], proc_root=str(proc), stop=True,
                                   stop_timeout=1),
                              commands={("systemctl", "show"): (0, "200\n", ""),
                                        ("systemctl", "is-enabled"): (0, "enabled\n", "")})
    assert result["stopped"][:2] == ["systemctl stop old-vllm.service", "systemctl disable old-vllm.service"]
    assert calls.index(["systemctl", "stop", "old-vllm.service"]) < calls.index(["systemctl", "disable", "old-vllm.service"])


def test_a_static_leftover_unit_is_not_disabled_and_check_mode_disables_nothing(proc):
    result, calls, _sig = run(dict(unit="dgxspark-vllm.service", ports=[25000], proc_root=str(proc), stop=True,
                                   stop_timeout=1),
                              commands={("systemctl", "show"): (0, "200\n", ""),
                                        ("systemctl", "is-enabled"): (0, "static\n", "")})
    assert "systemctl disable old-vllm.service" not in result["stopped"]
    assert ["systemctl", "disable", "old-vllm.service"] not in calls
    result, calls, _sig = run(dict(unit="dgxspark-vllm.service", ports=[25000], proc_root=str(proc), stop=True),
                              commands={("systemctl", "show"): (0, "200\n", ""),
                                        ("systemctl", "is-enabled"): (0, "enabled\n", "")}, check_mode=True)
    assert "systemctl disable old-vllm.service" in result["stopped"]
    assert not [c for c in calls if c[:2] in (["systemctl", "disable"], ["systemctl", "stop"])]


@pytest.mark.parametrize("out,enabled", [("enabled\n", True), ("enabled-runtime\n", True), ("static\n", False),
                                         ("disabled\n", False), ("masked\n", False), ("", False),
                                         ("transient\n", False)])
def test_unit_enabled(out, enabled):
    assert lo.unit_enabled(out) is enabled


def test_a_failing_systemctl_stop_fails_the_module(proc):
    result, _calls, _sig = run(dict(unit="dgxspark-vllm.service", ports=[25000], proc_root=str(proc), stop=True),
                               commands={("systemctl", "show"): (0, "200\n", ""),
                                         ("systemctl", "stop"): (1, "", "Access denied")})
    assert result["failed"] is True
    assert "systemctl stop old-vllm.service failed (1): Access denied" in result["msg"]


def run_free_space(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            free_space.main()
    return excinfo.value.args[0]


def test_free_space_of_a_path_not_there_yet(tmp_path):
    result = run_free_space(dict(path=str(tmp_path / "huggingface" / "hub"),
                                 repo_dir=str(tmp_path / "huggingface" / "hub" / "models--a--b")))
    assert result["exists"] is False
    assert result["checked"] == str(tmp_path)
    assert result["free_bytes"] > 0 and result["total_bytes"] >= result["free_bytes"]
    assert result["present_bytes"] == 0
    assert result["needed_bytes"] == 0
    assert result["changed"] is False


def test_free_space_counts_the_blobs_already_there(tmp_path):
    blobs = tmp_path / "hub" / "models--a--b" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / ("a" * 64)).write_bytes(b"x" * 1000)
    (blobs / ("b" * 64 + ".incomplete")).write_bytes(b"x" * 24)
    result = run_free_space(dict(path=str(tmp_path / "hub"), repo_dir=str(tmp_path / "hub" / "models--a--b"), size_gb=1))
    assert result["exists"] is True
    assert result["checked"] == str(tmp_path / "hub")
    assert result["present_bytes"] == 1024
    assert result["needed_bytes"] == 10 ** 9 - 1024


# ---------------------------------------------------------------------------
# real processes: the stop itself (SIGTERM, then SIGKILL) runs, against this machine's /proc

CHILD = r"""
import signal, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


def spawn(kind, token):
    """A child whose command line carries ``token`` (the module's pattern): nothing else on the machine matches."""
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", CHILD, kind, token], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"     # its SIGTERM disposition is set
    return child


def run_real(args):
    """main() on the real /proc; only systemctl (MainPID of a unit) is answered, nothing is mocked in the stop."""
    def run_command(self, argv, **_kwargs):
        assert argv[:2] == ["systemctl", "show"], argv   # the children are in no unit of ours: never a systemctl stop
        return (0, "1\n", "")

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command):
        with pytest.raises((ExitJson, FailJson)) as excinfo:
            leftover_processes.main()
    return excinfo.value.args[0]


@pytest.fixture
def token():
    import uuid
    return "dgxspark-leftover-test-%s" % uuid.uuid4().hex


def test_a_leftover_is_stopped_for_real_by_sigterm(token):
    import signal as sig
    child = spawn("polite", token)
    try:
        result = run_real(dict(unit="dgxspark-vllm.service", patterns=[token], stop=True, stop_timeout=10))
        assert not result.get("failed"), result
        assert [f["pid"] for f in result["leftovers"]] == [child.pid]
        assert result["stopped"] == ["SIGTERM pid %d (%s)" % (child.pid, result["leftovers"][0]["comm"])]
        assert result["remaining"] == []
        assert child.wait(timeout=5) == -sig.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_a_leftover_that_ignores_sigterm_gets_sigkill_after_the_timeout(token):
    import signal as sig
    import time
    child = spawn("stubborn", token)
    try:
        started = time.monotonic()
        result = run_real(dict(unit="dgxspark-vllm.service", patterns=[token], stop=True, stop_timeout=1))
        assert not result.get("failed"), result
        assert result["stopped"][-1] == "SIGKILL pid %d" % child.pid, result["stopped"]
        assert result["stopped"][0].startswith("SIGTERM pid %d" % child.pid)
        assert time.monotonic() - started >= 1.0           # it had its stop_timeout to exit after SIGTERM
        assert result["remaining"] == []
        assert child.wait(timeout=5) == -sig.SIGKILL
    finally:
        child.kill()
        child.wait()


def test_without_stop_a_real_leftover_is_only_reported(token):
    child = spawn("polite", token)
    try:
        result = run_real(dict(unit="dgxspark-vllm.service", patterns=[token]))
        assert [f["pid"] for f in result["leftovers"]] == [child.pid] and result["stopped"] == []
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
