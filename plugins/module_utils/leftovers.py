# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Leftover vLLM / Ray / EngineCore processes and holders of the serving ports, read from /proc.

Nothing else may hold the unified memory or the ports when vLLM starts: a
leftover Ray cluster or vLLM server costs the KV pool and the start fails ten
minutes later (seed 003). What belongs to our own serving unit is not a
leftover: a process in the unit's cgroup (venv kind) or in a container of our
compose project (container kind).

The inputs, as the kernel writes them:

``/proc/<pid>/cgroup`` (cgroup v2; a hybrid host also lists v1 lines, and
``name=systemd`` carries the same path as ``0::``)::

    0::/system.slice/dgxspark-vllm.service
    0::/system.slice/docker-4f1c...64 hex....scope          a docker container (systemd cgroup driver)
    0::/docker/4f1c...64 hex...                             a docker container (cgroupfs driver)
    0::/user.slice/user-1000.slice/session-3.scope          something started from a login shell

In a container (the sim) every path carries the container's own prefix, the
one PID 1 has: ``0::/docker/52a0.../init.scope`` -> prefix ``/docker/52a0...``.

``/proc/net/tcp`` and ``/proc/net/tcp6`` (state ``0A`` is LISTEN, the port is hex)::

      sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
       0: 00000000:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1660124 1 ...

A process holds a socket when ``/proc/<pid>/fd/<n>`` links to ``socket:[<inode>]``.
The parsers are pure; ``scan`` and ``stop`` do the I/O.
"""

from __future__ import annotations

import os
import re
import signal
import time

LISTEN = "0A"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DOCKER_SCOPE = re.compile(r"^docker-([0-9a-f]{64})\.scope$")
_SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$")

# The command lines the role treats as vLLM / Ray / EngineCore by default
# (roles/preflight/defaults/main.yml preflight_leftover_patterns holds the same list).
DEFAULT_PATTERNS = [
    r"^(\S*/)?vllm(\s|$)",                                    # vllm serve ... (the CLI as argv[0])
    r"^(\S*/)?python[0-9.]*\s+(\S*/)?vllm(\s|$)",             # python .../bin/vllm serve ...
    r"^(\S*/)?python[0-9.]*\s+(-\S+\s+)*-m\s+vllm(\.|\s|$)",  # python -m vllm.entrypoints.openai.api_server
    r"^VLLM::",                                               # vLLM's process titles (VLLM::EngineCore, VLLM::Worker_TP0)
    r"^(\S*::)?EngineCore",                                   # an engine core under its own title
    r"^(\S*/)?(raylet|gcs_server)(\s|$)",                     # the Ray daemons
    r"^(\S*/)?(python[0-9.]*\s+)?(\S*/)?ray\s",               # ray start / ray stop ... (the Ray CLI)
    r"^ray::",                                                # Ray worker titles (ray::IDLE, ray::RayWorkerWrapper)
    r"/ray/_private/workers/",                                # Ray's Python workers (default_worker.py)
]


def parse_cgroup(text):
    """The systemd cgroup path of a process from ``/proc/<pid>/cgroup`` text ("" if none).

    >>> parse_cgroup("12:pids:/x\\n0::/system.slice/dgxspark-vllm.service\\n")
    '/system.slice/dgxspark-vllm.service'
    """
    unified = None
    named = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            unified = path.strip()
        elif controllers == "name=systemd":
            named = path.strip()
    # pure v1 (legacy) hosts have only name=systemd; hybrid ones carry the same path in both
    if named is not None and (unified is None or unified == "/"):
        return named
    return unified or named or ""


def cgroup_root(pid1_cgroup):
    """The prefix of this machine's cgroup tree, from PID 1's path: ``/docker/52a0.../init.scope`` -> ``/docker/52a0...``.

    ``""`` on a host (``/init.scope``) and in a private cgroup namespace.
    """
    path = (pid1_cgroup or "").rstrip("/")
    if path.endswith("/init.scope"):
        return path[:-len("/init.scope")]
    return ""


def cgroup_owner(path, root="", unit="", container_ids=()):
    """Who a process belongs to, from its systemd cgroup path.

    Returns ``{"ours": bool, "unit": "<x>.service" or "", "container": "<64 hex>" or "", "scope": "<last component>"}``:
    ``unit`` is a system service (directly under system.slice), ``container`` a docker container. ``ours``: in
    ``unit`` (our serving unit, nested cgroups included; a list: any of the collection's units, the API proxy too) or
    in one of ``container_ids``.
    """
    rel = path or ""
    if root and (rel == root or rel.startswith(root + "/")):
        rel = rel[len(root):]
    comps = [c for c in rel.split("/") if c]
    container = ""
    for idx, comp in enumerate(comps):
        match = _DOCKER_SCOPE.match(comp)
        if match:
            container = match.group(1)
        elif comp == "docker" and idx + 1 < len(comps) and _HEX64.match(comps[idx + 1]):
            container = comps[idx + 1]
    service = ""
    if len(comps) >= 2 and comps[0] == "system.slice" and comps[1].endswith(".service"):
        service = comps[1]
    ids = set(container_ids or ())
    units = [unit] if isinstance(unit, str) else list(unit or ())
    ours = any(u and u in comps for u in units) or bool(container and container in ids)
    return {"ours": ours, "unit": service, "container": container, "scope": comps[-1] if comps else ""}


def parse_cmdline(raw):
    """``/proc/<pid>/cmdline`` bytes -> argv (NUL-separated; a process title may use spaces instead)."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    return [arg for arg in (raw or "").split("\0") if arg != ""]


def parse_stat(text):
    """``/proc/<pid>/stat`` -> ``(comm, ppid)``; comm may hold spaces and parentheses."""
    text = text or ""
    start = text.find("(")
    end = text.rfind(")")
    if start < 0 or end < start:
        return "", 0
    fields = text[end + 2:].split()
    try:
        ppid = int(fields[1])
    except (IndexError, ValueError):
        ppid = 0
    return text[start + 1:end], ppid


def parse_net_tcp(text):
    """``/proc/net/tcp`` or ``tcp6`` text -> ``[{"port": 8888, "state": "0A", "inode": 1660124, "uid": 995}, ...]`` (local side)."""
    sockets = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        try:
            port = int(fields[1].rsplit(":", 1)[1], 16)
            uid = int(fields[7])
            inode = int(fields[9])
        except ValueError:
            continue
        sockets.append({"port": port, "state": fields[3].upper(), "inode": inode, "uid": uid})
    return sockets


def listening(sockets, ports):
    """Inode -> port of the LISTEN sockets on one of ``ports``."""
    wanted = set(int(p) for p in ports or ())
    return dict((s["inode"], s["port"]) for s in sockets if s["state"] == LISTEN and s["port"] in wanted)


def socket_uids(sockets):
    """Inode -> uid of the socket's owner (what /proc/net/tcp tells without reading any process's fds)."""
    return dict((s["inode"], s.get("uid")) for s in sockets)


def command_line(argv, comm=""):
    """What the patterns are matched against: argv joined with spaces, or the comm for an empty cmdline."""
    return " ".join(argv) if argv else comm


# Flags whose value is a secret, and NAME=value words whose name says it is one: masked in every report.
SECRET_FLAGS = ("--api-key", "--token", "--hf-token", "--password", "--secret", "--auth-token", "--access-token")
_SECRET_WORD_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Za-z0-9_]*)=(.+)$", re.IGNORECASE)


def mask_argv(argv):
    """argv with secret values as ``****``: ``--api-key k``, ``--api-key=k``, ``VLLM_API_KEY=k``, ``hf_...`` tokens.

    >>> mask_argv(["vllm", "serve", "m", "--api-key", "s3cr3t", "--token=abc", "HF_TOKEN=hf_x", "--port", "8888"])
    ['vllm', 'serve', 'm', '--api-key', '****', '--token=****', 'HF_TOKEN=****', '--port', '8888']
    """
    out = []
    mask_next = False
    for arg in argv or ():
        if mask_next:
            out.append("****")
            mask_next = False
            continue
        flag, sep, _value = arg.partition("=")
        if flag in SECRET_FLAGS:
            if sep:
                out.append(flag + "=****")
            else:
                out.append(arg)
                mask_next = True
            continue
        word = _SECRET_WORD_RE.match(arg)
        if word:
            out.append(word.group(1) + "=****")
        elif re.match(r"^hf_[A-Za-z0-9]{8,}$", arg):
            out.append("****")
        else:
            out.append(arg)
    return out


def matches(cmdline, patterns):
    """The first pattern (a Python regex, re.search) that matches ``cmdline``, or None."""
    for pattern in patterns or ():
        if re.search(pattern, cmdline or ""):
            return pattern
    return None


def classify(processes, listeners, patterns, unit="", container_ids=(), root="", exclude=(), listener_uids=None):
    """The leftovers among ``processes``.

    ``processes``: ``[{"pid", "comm", "argv", "cgroup", "inodes", "uid", "opaque"}]`` (``inodes``: socket inodes of
    its fds; ``opaque``: its fds could not be read - root without CAP_SYS_PTRACE, as in a container, cannot read
    another user's); ``listeners``: inode -> port (see ``listening``); ``listener_uids``: inode -> owner uid (see
    ``socket_uids``). A process is a leftover when its command line matches a pattern or it listens on one of the
    ports, and it is not ours (``cgroup_owner``). A listener no readable process holds belongs to one of the opaque
    processes of its uid: when all of those are ours, so is the port. Each leftover::

        {"pid": 4242, "comm": "vllm", "cmdline": "vllm serve ...", "ports": [8888], "matched": "<pattern>" or "",
         "unit": "old-vllm.service", "container": "", "action": "unit" | "container" | "signal" | "manual"}

    ``action`` is how ``stop`` would end it: ``unit`` (systemctl stop: a manual kill is raced by the unit's
    restart; ``unit_actions`` keeps it only for a unit whose main process is the leftover), ``container``
    (docker stop), ``signal`` (SIGTERM, then SIGKILL) or ``manual`` (a port holder in a system service that is
    not vLLM/Ray, e.g. docker-proxy or jupyter: the role names it and leaves it alone). A listening socket no
    process holds (it lives in another namespace) is reported with pid 0, ``manual``.
    """
    excluded = set(exclude or ())
    held = set()
    found = []
    for proc in sorted(processes, key=lambda p: p["pid"]):
        ports = sorted(set(listeners[i] for i in proc.get("inodes", ()) if i in listeners))
        held.update(i for i in proc.get("inodes", ()) if i in listeners)
        if proc["pid"] in excluded:
            continue
        cmdline = command_line(proc.get("argv") or [], proc.get("comm", ""))
        matched = matches(cmdline, patterns) if proc.get("argv") else None
        if not matched and not ports:
            continue
        owner = cgroup_owner(proc.get("cgroup", ""), root=root, unit=unit, container_ids=container_ids)
        if owner["ours"]:
            continue
        if owner["container"]:
            action = "container"
        elif owner["unit"]:
            action = "unit" if matched else "manual"
        else:
            action = "signal"
        shown = command_line(mask_argv(proc.get("argv") or []), proc.get("comm", ""))
        found.append({"pid": proc["pid"], "comm": proc.get("comm", ""), "cmdline": shown[:200], "ports": ports,
                      "matched": matched or "", "unit": owner["unit"], "container": owner["container"],
                      "scope": owner["scope"], "action": action})
    uids = listener_uids or {}
    for inode, port in sorted(listeners.items(), key=lambda item: item[1]):
        if inode in held:
            continue
        candidates = [p for p in processes if p.get("opaque") and p["pid"] not in excluded
                      and (uids.get(inode) is None or p.get("uid") == uids.get(inode))]
        others = [p for p in candidates
                  if not cgroup_owner(p.get("cgroup", ""), root=root, unit=unit, container_ids=container_ids)["ours"]]
        if candidates and not others:
            continue  # held by one of our own processes whose fds this probe may not read
        found.append({"pid": 0, "comm": "", "cmdline": "", "ports": [port], "matched": "", "unit": "",
                      "container": "", "scope": "", "action": "manual", "uid": uids.get(inode),
                      "candidates": ["%d %s" % (p["pid"], p.get("comm", "")) for p in others[:5]]})
    return found


def unit_actions(found, main_pids):
    """Keep ``systemctl stop`` for the units whose main process is a leftover (a vLLM or Ray service).

    ``main_pids``: unit -> MainPID (``systemctl show -p MainPID``). A vLLM/Ray process that only lives in some
    other service's cgroup (started from an ssh session on a host without logind lands in ssh.service) is
    signalled instead: stopping that unit would take the service down with it.
    """
    leftover_pids = set(f["pid"] for f in found if f["matched"])
    out = []
    for item in found:
        if item["action"] == "unit" and main_pids.get(item["unit"]) not in leftover_pids:
            item = dict(item, action="signal")
        out.append(item)
    return out


def unit_enabled(is_enabled_output):
    """Does ``systemctl is-enabled UNIT`` output say the unit starts at boot? (``enabled``, ``enabled-runtime``;
    not ``static``, ``disabled``, ``masked``, ``transient`` or ``generated``)."""
    return (is_enabled_output or "").strip().splitlines()[:1] in (["enabled"], ["enabled-runtime"])


def describe(leftover):
    """One line per leftover, for the failure message."""
    if not leftover["pid"]:
        ports = ", ".join(map(str, leftover["ports"]))
        if leftover.get("candidates"):
            return "port %s: held by a process of uid %s whose file descriptors cannot be read (pid %s)" \
                " [not stopped by the run]" % (ports, leftover.get("uid"), ", pid ".join(leftover["candidates"]))
        return "port %s: listening socket of no process this node can see [not stopped by the run]" % ports
    text = "pid %d %s (%s)" % (leftover["pid"], leftover["comm"], leftover["cmdline"][:80])
    if leftover["ports"]:
        text += " holds port %s" % ", ".join(map(str, leftover["ports"]))
    if leftover["container"]:
        text += " in container %s" % leftover["container"][:12]
    elif leftover["unit"]:
        text += " in %s" % leftover["unit"]
    elif leftover["scope"]:
        text += " in %s" % leftover["scope"]
    return text + {
        "unit": " [stop: systemctl stop %s]" % leftover["unit"],
        "container": " [stop: docker stop %s]" % leftover["container"][:12],
        "signal": " [stop: SIGTERM, then SIGKILL]",
        "manual": " [not stopped by the run: another system service]",
    }.get(leftover["action"], "")


# --------------------------------------------------------------------------- I/O


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return b"" if binary else ""


def pids(proc_root="/proc"):
    """The numeric entries of /proc."""
    try:
        return sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return []


def socket_inodes(proc_root, pid):
    """Socket inodes among a process's file descriptors; None when they cannot be read (no ptrace access)."""
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    inodes = []
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    denied = False
    for name in names:
        try:
            match = _SOCKET_LINK.match(os.readlink(os.path.join(fd_dir, name)))
        except PermissionError:
            denied = True
            continue
        except OSError:
            continue
        if match:
            inodes.append(int(match.group(1)))
    return None if denied and not inodes else inodes


def _uid(path):
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def ancestors(proc_root, pid):
    """``pid`` and its parents up to PID 1 (the probe and the session that runs it are never leftovers)."""
    chain = []
    while pid > 0 and pid not in chain:
        chain.append(pid)
        pid = parse_stat(_read(os.path.join(proc_root, str(pid), "stat")))[1]
    return chain


def scan(proc_root="/proc", ports=()):
    """Read every process (comm, argv, systemd cgroup, socket inodes when ports are asked) and the listeners.

    Returns ``(processes, listeners, root, listener_uids)``.
    """
    sockets = parse_net_tcp(_read(os.path.join(proc_root, "net", "tcp"))) + \
        parse_net_tcp(_read(os.path.join(proc_root, "net", "tcp6")))
    listeners = listening(sockets, ports)
    root = cgroup_root(parse_cgroup(_read(os.path.join(proc_root, "1", "cgroup"))))
    processes = []
    for pid in pids(proc_root):
        base = os.path.join(proc_root, str(pid))
        comm, _ppid = parse_stat(_read(os.path.join(base, "stat")))
        if not comm:
            continue  # gone meanwhile
        inodes = socket_inodes(proc_root, pid) if listeners else []
        processes.append({
            "pid": pid,
            "comm": comm,
            "argv": parse_cmdline(_read(os.path.join(base, "cmdline"), binary=True)),
            "cgroup": parse_cgroup(_read(os.path.join(base, "cgroup"))),
            "inodes": inodes or [],
            "opaque": inodes is None,
            "uid": _uid(base),
        })
    return processes, listeners, root, socket_uids(sockets)


def alive(proc_root, pid):
    """Whether /proc/<pid> still exists (and is not a zombie)."""
    stat = _read(os.path.join(proc_root, str(pid), "stat"))
    if not stat:
        return False
    end = stat.rfind(")")
    return not stat[end + 2:end + 3] == "Z"


def wait_gone(proc_root, pid_list, timeout, poll=0.5):
    """Wait until none of ``pid_list`` is alive or ``timeout`` seconds passed; returns the ones still alive."""
    deadline = time.time() + timeout
    left = [p for p in pid_list if alive(proc_root, p)]
    while left and time.time() < deadline:
        time.sleep(poll)
        left = [p for p in left if alive(proc_root, p)]
    return left


def signal_pids(pid_list, signum=signal.SIGTERM):
    """Send ``signum`` to each pid; a process already gone is fine."""
    for pid in pid_list:
        try:
            os.kill(pid, signum)
        except OSError:
            pass


def listener_check(proc_root, port, pid):
    """Does process ``pid`` itself hold every LISTEN socket on ``port`` (and is there one)?

    Returns ``(status, reason)``: ``("ok", "")``; ``("none", reason)`` when nothing listens on the port yet;
    ``("other", reason)`` when a LISTEN socket on it is held by another process (or by none this node can
    read), the reason naming each holder (pid, uid, command line). Reads /proc/net/tcp{,6} and every
    process's fds through ``scan`` (the same parsers the leftover check uses). When ``pid``'s own fds cannot
    be read, a socket of ``pid``'s uid (not root) counts as its own only while ``pid`` is that uid's one
    process (a DynamicUser= unit's user).
    """
    processes, listeners, _root, uids = scan(proc_root, ports=[port])
    if not listeners:
        return "none", "nothing listens on port %d" % port
    mine, me = set(), None
    for proc in processes:
        if proc["pid"] == pid:
            mine, me = set(proc["inodes"]), proc
    others = []
    for inode in sorted(listeners):
        if pid and inode in mine:
            continue
        if pid and me is not None and me["opaque"] and me["uid"] not in (None, 0) and uids.get(inode) == me["uid"] \
                and all(p["pid"] == pid for p in processes if p["uid"] == me["uid"]):
            # ``pid`` runs as a user of its own (systemd's DynamicUser=) whose fds root cannot read without
            # CAP_SYS_PTRACE (a container): the socket is that user's and ``pid`` is that user's only process.
            continue
        holders = [p for p in processes if inode in p["inodes"] and p["pid"] != pid]
        if holders:
            for holder in holders:
                text = " ".join(command_line(mask_argv(holder["argv"]), holder["comm"]).split())
                others.append("pid %d (uid %s) %s" % (holder["pid"], holder["uid"], text[:120]))
        else:
            # Without CAP_SYS_PTRACE (a container) root cannot read another user's fds: name that uid's processes.
            owner = uids.get(inode)
            candidates = ["pid %d %s" % (p["pid"], " ".join(command_line(mask_argv(p["argv"]), p["comm"]).split())[:120])
                          for p in processes if p["opaque"] and p["uid"] == owner and p["pid"] != pid]
            others.append("a socket of uid %s (inode %d) whose holder's file descriptors cannot be read%s"
                          % (owner, inode, (": one of " + "; ".join(candidates)) if candidates else ""))
    if others:
        return "other", "port %d is held by %s, not by pid %s" % (port, "; ".join(others), pid or "(none)")
    return "ok", ""
