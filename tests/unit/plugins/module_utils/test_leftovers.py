# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/leftovers.py: /proc parsers, ownership, the default patterns, classify."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils import leftovers as lo

REPO_ROOT = Path(__file__).resolve().parents[4]
OUR_UNIT = "dgxspark-vllm.service"
CID = "4f1c" + "0" * 56 + "beef"
SIM_NODE = "52a044d5be3dfbc3173f74cd17a70f6f032aee67bd92067cfbec06a50b69684b"

# /proc/<pid>/cgroup as read on a spark-sim node (hybrid host, the node's container prefix on every path)
CGROUP_SIM_HYBRID = """\
16:perf_event:/
14:net_cls,net_prio:/
9:name=systemd:/docker/{node}/system.slice/ssh.service
8:pids:/docker/{node}/system.slice/ssh.service
7:blkio:/docker/{node}
1:cpu:/docker/{node}
0::/docker/{node}/system.slice/ssh.service
""".format(node=SIM_NODE)
CGROUP_SIM_PID1 = "9:name=systemd:/docker/{node}/init.scope\n0::/docker/{node}/init.scope\n".format(node=SIM_NODE)
# a pure cgroup v2 host (DGX OS 7 / Ubuntu 24.04)
CGROUP_V2_OURS = "0::/system.slice/dgxspark-vllm.service\n"
# a legacy v1 host: only name=systemd tells the unit
CGROUP_V1 = "12:pids:/system.slice/old-vllm.service\n1:name=systemd:/system.slice/old-vllm.service\n"

# /proc/net/tcp and tcp6 as read on a spark-sim node (ssh on 22, the hub stand-in on 127.0.0.1:5564, docker's DNS),
# plus a listener on 8888 and an established connection from 8888; the fields after the inode are cut short here
NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1660124 1 000000000fa7da39 100 0 0 10 0
   1: 0100007F:15BC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1659734 1 000000006bce9b8e 100 0 0 10 0
   2: 0B00007F:ABA7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1659041 1 0000000071f8aa6c 100 0 0 10 0
   3: 0B014D0A:0016 FE014D0A:D748 01 00000000:00000000 02:000AFC5A 00000000     0        0 1703379 3 00000000268ffdf4 21 4 15 30 -1
   4: 00000000:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1777001 1 0000000000000000 100 0 0 10 0
   5: 0100007F:22B8 0100007F:C350 01 00000000:00000000 00:00000000 00000000   999        0 1777002 1 0000000000000000 20 4 30 10 -1
"""
NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1660126 1
   1: 00000000000000000000000000000000:61A8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1777003 1
"""


def test_parse_cgroup_prefers_the_systemd_path():
    assert lo.parse_cgroup(CGROUP_SIM_HYBRID) == "/docker/%s/system.slice/ssh.service" % SIM_NODE
    assert lo.parse_cgroup(CGROUP_V2_OURS) == "/system.slice/dgxspark-vllm.service"
    assert lo.parse_cgroup(CGROUP_V1) == "/system.slice/old-vllm.service"
    assert lo.parse_cgroup("") == ""
    assert lo.parse_cgroup("garbage\n") == ""


def test_cgroup_root():
    assert lo.cgroup_root(lo.parse_cgroup(CGROUP_SIM_PID1)) == "/docker/%s" % SIM_NODE
    assert lo.cgroup_root("/init.scope") == ""
    assert lo.cgroup_root("/") == ""
    assert lo.cgroup_root("") == ""


@pytest.mark.parametrize("path, root, containers, expect", [
    ("/system.slice/dgxspark-vllm.service", "", (), dict(ours=True, unit=OUR_UNIT, container="")),
    ("/system.slice/dgxspark-vllm.service/payload", "", (), dict(ours=True, unit=OUR_UNIT)),
    ("/docker/%s/system.slice/dgxspark-vllm.service" % SIM_NODE, "/docker/%s" % SIM_NODE, (),
     dict(ours=True, unit=OUR_UNIT, container="")),
    # the sim node's own container prefix is not a container of ours or anybody's
    ("/docker/%s/system.slice/ssh.service" % SIM_NODE, "/docker/%s" % SIM_NODE, (),
     dict(ours=False, unit="ssh.service", container="")),
    ("/system.slice/old-vllm.service", "", (), dict(ours=False, unit="old-vllm.service")),
    ("/system.slice/docker-%s.scope" % CID, "", (CID,), dict(ours=True, unit="", container=CID)),
    ("/system.slice/docker-%s.scope" % CID, "", (), dict(ours=False, unit="", container=CID)),
    ("/docker/%s" % CID, "", (CID,), dict(ours=True, container=CID)),
    ("/docker/%s/docker/%s" % (SIM_NODE, CID), "/docker/%s" % SIM_NODE, (), dict(ours=False, container=CID)),
    ("/user.slice/user-1000.slice/session-3.scope", "", (), dict(ours=False, unit="", container="", scope="session-3.scope")),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service", "", (), dict(ours=False, unit="")),
])
def test_cgroup_owner(path, root, containers, expect):
    owner = lo.cgroup_owner(path, root=root, unit=OUR_UNIT, container_ids=containers)
    for key, value in expect.items():
        assert owner[key] == value, (key, owner)


def test_parse_net_tcp_and_listening():
    sockets = lo.parse_net_tcp(NET_TCP) + lo.parse_net_tcp(NET_TCP6)
    assert {"port": 22, "state": "0A", "inode": 1660124, "uid": 0} in sockets
    assert {"port": 8888, "state": "01", "inode": 1777002, "uid": 999} in sockets
    assert lo.listening(sockets, [8888, 25000]) == {1777001: 8888, 1777003: 25000}
    assert lo.socket_uids(sockets)[1777001] == 999
    assert lo.listening(sockets, []) == {}
    assert lo.parse_net_tcp("") == []
    assert lo.parse_net_tcp("header\n  0: garbage\n") == []


def test_parse_stat_and_cmdline():
    assert lo.parse_stat("695 (VLLM::EngineCor) S 1 695 695 0 -1 4194560 ...") == ("VLLM::EngineCor", 1)
    assert lo.parse_stat("12 (a (weird) name) R 7 12 12") == ("a (weird) name", 7)
    assert lo.parse_stat("") == ("", 0)
    assert lo.parse_cmdline(b"/opt/v/bin/python3\x00/opt/v/bin/vllm\x00serve\x00m\x00") == \
        ["/opt/v/bin/python3", "/opt/v/bin/vllm", "serve", "m"]
    assert lo.parse_cmdline(b"VLLM::EngineCore\x00\x00\x00") == ["VLLM::EngineCore"]
    assert lo.parse_cmdline(b"") == []


# Command lines seen on Sparks (the seeds' recipes, vLLM 0.27 process titles, Ray 2.x) and ones that must not match.
LEFTOVER_LINES = [
    "/opt/dgxspark/vllm/bin/python3 /opt/dgxspark/vllm/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --port 8888",
    "/usr/bin/python3 /usr/local/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash-0731",
    "vllm serve /models/dsv4",
    "/home/nvidia/venvs/vllm/bin/vllm serve x --headless",
    "python3 -m vllm.entrypoints.openai.api_server --model x",
    "/usr/bin/python3.12 -u -m vllm.entrypoints.cli.main serve x",
    "VLLM::EngineCore",
    "VLLM::Worker_TP0",
    "EngineCore_0",
    "/home/nvidia/venvs/vllm/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet"
    " --raylet_socket_name=/tmp/ray/session/sockets/raylet",
    "/home/nvidia/venvs/vllm/lib/python3.12/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray",
    "/home/nvidia/venvs/vllm/bin/python3 /home/nvidia/venvs/vllm/bin/ray start --head --port 6379",
    "ray::IDLE",
    "ray::RayWorkerWrapper.execute_method",
    "/home/nvidia/venvs/vllm/bin/python3 -u /home/nvidia/venvs/vllm/lib/python3.12/site-packages/ray/_private/workers/default_worker.py",
]
NOT_LEFTOVER_LINES = [
    "sudo -u vllm bash",
    "runuser -u vllm -- id",
    "ls /opt/dgxspark/vllm",
    "/opt/dgxspark/vllm/bin/python3 -m pip list",
    "docker compose -f /opt/dgxspark/vllm-compose/compose.yaml ps",
    "grep EngineCore /var/log/syslog",
    "/usr/bin/python3 /usr/lib/spark-sim/sparksim/hub.py",
    "array-tool --ray 3",
    "sshd: spark [priv]",
    "journalctl -u dgxspark-vllm.service",
    "python3 -m http.server 8000",
]


@pytest.mark.parametrize("line", LEFTOVER_LINES)
def test_default_patterns_match_vllm_and_ray(line):
    assert lo.matches(line, lo.DEFAULT_PATTERNS), line


@pytest.mark.parametrize("line", NOT_LEFTOVER_LINES)
def test_default_patterns_leave_other_commands_alone(line):
    assert lo.matches(line, lo.DEFAULT_PATTERNS) is None, (line, lo.matches(line, lo.DEFAULT_PATTERNS))


def test_role_default_patterns_are_the_module_defaults():
    defaults = yaml.safe_load((REPO_ROOT / "roles" / "preflight" / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((REPO_ROOT / "roles" / "preflight" / "meta" / "argument_specs.yml").read_text())
    assert defaults["preflight_leftover_patterns"] == lo.DEFAULT_PATTERNS
    assert spec["argument_specs"]["main"]["options"]["preflight_leftover_patterns"]["default"] == lo.DEFAULT_PATTERNS


def _proc(pid, argv, cgroup, inodes=(), comm=None):
    return {"pid": pid, "comm": comm or (argv[0].rsplit("/", 1)[-1] if argv else "kworker/0:1")[:15],
            "argv": list(argv), "cgroup": cgroup, "inodes": list(inodes)}


def test_classify():
    listeners = {1777001: 8888, 1777003: 25000, 1999999: 8888}
    processes = [
        _proc(1, ["/sbin/init"], "/init.scope"),
        _proc(2, [], "/", comm="kthreadd"),
        # ours: the serving unit (venv kind) and its engine core
        _proc(100, ["/opt/dgxspark/vllm/bin/python3", "/opt/dgxspark/vllm/bin/vllm", "serve", "m"],
              "/system.slice/dgxspark-vllm.service", [1777001]),
        _proc(101, ["VLLM::EngineCore"], "/system.slice/dgxspark-vllm.service"),
        # ours: the compose container (container kind)
        _proc(150, ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"], "/system.slice/docker-%s.scope" % CID),
        # leftovers
        _proc(200, ["/opt/old/bin/python3", "/opt/old/bin/vllm", "serve", "m"], "/system.slice/old-vllm.service"),
        _proc(300, ["ray::IDLE"], "/user.slice/user-1000.slice/session-3.scope"),
        _proc(400, ["python3", "-m", "http.server", "25000"], "/user.slice/user-1000.slice/session-4.scope", [1777003]),
        _proc(500, ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-port", "8888"], "/system.slice/docker.service"),
        _proc(600, ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"], "/system.slice/docker-%s.scope" % ("a" * 64)),
        # the probe itself and its session
        _proc(700, ["/usr/bin/python3", "vllm serve"], "/user.slice/user-1000.slice/session-9.scope"),
    ]
    found = lo.classify(processes, listeners, lo.DEFAULT_PATTERNS, unit=OUR_UNIT, container_ids=[CID], exclude=[700])
    by_pid = dict((f["pid"], f) for f in found)
    assert sorted(by_pid) == [0, 200, 300, 400, 600]
    assert by_pid[200]["action"] == "unit" and by_pid[200]["unit"] == "old-vllm.service"
    assert by_pid[300]["action"] == "signal" and by_pid[300]["scope"] == "session-3.scope"
    assert by_pid[400]["action"] == "signal" and by_pid[400]["ports"] == [25000] and by_pid[400]["matched"] == ""
    assert by_pid[600]["action"] == "container" and by_pid[600]["container"] == "a" * 64
    assert by_pid[0]["action"] == "manual" and by_pid[0]["ports"] == [8888]  # 1999999: held by nobody visible
    # docker-proxy holding the API port: a port holder in another system service, named but never stopped
    processes[8]["inodes"] = [42]
    found = lo.classify([processes[8]], {42: 8888}, lo.DEFAULT_PATTERNS, unit=OUR_UNIT)
    assert [(f["pid"], f["action"], f["unit"]) for f in found] == [(500, "manual", "docker.service")]


def test_classify_in_a_sim_node():
    root = "/docker/%s" % SIM_NODE
    processes = [
        _proc(10, ["/opt/dgxspark/vllm/bin/vllm", "serve"], root + "/system.slice/dgxspark-vllm.service", [5]),
        _proc(11, ["VLLM::EngineCore", "3600"], root + "/system.slice/ssh.service"),
    ]
    found = lo.classify(processes, {5: 8888}, lo.DEFAULT_PATTERNS, unit=OUR_UNIT, root=root)
    assert [(f["pid"], f["unit"], f["action"]) for f in found] == [(11, "ssh.service", "unit")]
    # ssh.service's main process is sshd, not the leftover: signal it, never stop ssh
    refined = lo.unit_actions(found, {"ssh.service": 71})
    assert [(f["pid"], f["action"]) for f in refined] == [(11, "signal")]
    assert lo.unit_actions(found, {"ssh.service": 11})[0]["action"] == "unit"


def test_describe():
    found = lo.classify([_proc(200, ["/opt/old/bin/vllm", "serve", "m"], "/system.slice/old-vllm.service", [1])],
                        {1: 8888}, lo.DEFAULT_PATTERNS, unit=OUR_UNIT)
    assert lo.describe(found[0]) == ("pid 200 vllm (/opt/old/bin/vllm serve m) holds port 8888 in old-vllm.service"
                                     " [stop: systemctl stop old-vllm.service]")
    assert "port 25000" in lo.describe({"pid": 0, "ports": [25000], "action": "manual"})


def test_a_listener_behind_unreadable_fds():
    """Root in a container (no CAP_SYS_PTRACE) cannot read the fds of the vllm user's processes (the sim)."""
    serving = dict(_proc(10, ["/opt/dgxspark/vllm/bin/vllm", "serve"], "/system.slice/dgxspark-vllm.service"),
                   opaque=True, uid=995)
    other_user = dict(_proc(20, ["/usr/bin/dbus-daemon"], "/system.slice/dbus.service"), opaque=True, uid=101)
    stranger = dict(_proc(30, ["/usr/bin/python3", "-m", "http.server", "8888"],
                          "/user.slice/user-995.slice/session-2.scope"), opaque=True, uid=995)
    listeners, uids = {5: 8888}, {5: 995}
    # every opaque process of the socket's uid is ours: the port is ours
    assert lo.classify([serving, other_user], listeners, lo.DEFAULT_PATTERNS, unit=OUR_UNIT, listener_uids=uids) == []
    # one of them is not: the port is named, with the candidates
    found = lo.classify([serving, other_user, stranger], listeners, lo.DEFAULT_PATTERNS, unit=OUR_UNIT, listener_uids=uids)
    assert [(f["pid"], f["ports"], f["candidates"]) for f in found] == [(0, [8888], ["30 python3"])]
    assert lo.describe(found[0]) == ("port 8888: held by a process of uid 995 whose file descriptors cannot be read"
                                     " (pid 30 python3) [not stopped by the run]")
    # no opaque process of that uid at all: somebody this probe cannot see
    found = lo.classify([other_user], listeners, lo.DEFAULT_PATTERNS, unit=OUR_UNIT, listener_uids=uids)
    assert [(f["pid"], f["candidates"]) for f in found] == [(0, [])]


def test_a_leftovers_secret_never_shows_in_the_report():
    argv = ["/opt/old/bin/vllm", "serve", "m", "--api-key", "sk-live-0123456789", "--hf-token=hf_abcdefghijkl", "--port", "8888"]
    found = lo.classify([_proc(200, argv, "/user.slice/user-1000.slice/session-3.scope", [1])],
                        {1: 8888}, lo.DEFAULT_PATTERNS, unit=OUR_UNIT)
    text = lo.describe(found[0])
    assert "--api-key ****" in found[0]["cmdline"] and "--hf-token=****" in found[0]["cmdline"]
    assert "sk-live" not in text and "hf_abc" not in text and "sk-live" not in found[0]["cmdline"]
    assert found[0]["matched"]  # still recognised as vLLM


@pytest.mark.parametrize("argv,shown", [
    (["vllm", "serve", "--api-key", "a", "b"], ["vllm", "serve", "--api-key", "****", "b"]),
    (["env", "VLLM_API_KEY=secret", "vllm"], ["env", "VLLM_API_KEY=****", "vllm"]),
    (["ray", "start", "--token", "t0k"], ["ray", "start", "--token", "****"]),
    (["python3", "x.py", "hf_0123456789abcdef"], ["python3", "x.py", "****"]),
    (["vllm", "serve", "--port", "8888"], ["vllm", "serve", "--port", "8888"]),
])
def test_mask_argv(argv, shown):
    assert lo.mask_argv(argv) == shown


def test_listener_check_names_the_uids_processes_when_no_fd_can_be_read(monkeypatch):
    """A container's root without CAP_SYS_PTRACE cannot read another user's fds (the sim): the squatter is then
    named by the processes of the socket's uid whose fds are opaque (issue 24 finding 5)."""
    processes = [
        {"pid": 10, "comm": "python3", "argv": ["python3", "-c", "import socket\nbind"], "cgroup": "", "inodes": [],
         "opaque": True, "uid": 65534},
        {"pid": 11, "comm": "sleep", "argv": ["sleep", "9"], "cgroup": "", "inodes": [], "opaque": True, "uid": 1000},
        {"pid": 20, "comm": "python3", "argv": ["python3", "srv.py"], "cgroup": "", "inodes": [555], "opaque": False,
         "uid": 0},
    ]
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): (processes, {777: 8874}, "", {777: 65534}))
    status, reason = lo.listener_check("/proc", 8874, 20)
    assert status == "other"
    assert "a socket of uid 65534 (inode 777)" in reason and "one of pid 10 python3 -c import socket bind" in reason
    assert "pid 11" not in reason and reason.endswith("not by pid 20")
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): (processes, {555: 8874}, "", {555: 0}))
    assert lo.listener_check("/proc", 8874, 20) == ("ok", "")
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): (processes, {}, "", {}))
    assert lo.listener_check("/proc", 8874, 20)[0] == "none"


def test_listener_check_takes_an_unreadable_holder_by_its_own_uid_only_when_it_is_that_uids_one_process(monkeypatch):
    """The image transfer runs as a DynamicUser= user; a container's root cannot read its fds (the sim). The socket is
    the unit's when its uid is that user's and the unit's main process is the one process of that uid (issue 24
    finding 10); another process of that uid, a root-owned socket or an unreadable root pid are not taken."""
    server = {"pid": 30, "comm": "python3", "argv": ["python3", "xfer.py"], "cgroup": "", "inodes": [], "opaque": True,
              "uid": 61234}
    other = {"pid": 31, "comm": "python3", "argv": ["python3", "-c", "bind"], "cgroup": "", "inodes": [],
             "opaque": True, "uid": 61234}
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): ([server], {888: 8874}, "", {888: 61234}))
    assert lo.listener_check("/proc", 8874, 30) == ("ok", "")
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): ([server, other], {888: 8874}, "", {888: 61234}))
    status, reason = lo.listener_check("/proc", 8874, 30)
    assert status == "other" and "one of pid 31" in reason
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): ([server], {888: 8874}, "", {888: 65534}))
    assert lo.listener_check("/proc", 8874, 30)[0] == "other"
    rooted = dict(server, uid=0)
    monkeypatch.setattr(lo, "scan", lambda proc_root, ports=(): ([rooted], {888: 8874}, "", {888: 0}))
    assert lo.listener_check("/proc", 8874, 30)[0] == "other"
