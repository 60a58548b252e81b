# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""doctor.yml's verdicts: each check a name, a class and a one-sentence remedy (pure, standard library only).

The doctor role reads every node with the modules the other roles use (fabric_link_facts, roce_gid_facts,
leftover_processes, memory_report, free_space, doctor_facts, the service role's end-to-end check on the
head) and hands what it read to ``report`` as ``probes``::

    {"spark-head": {"links": <fabric_link_facts result>, "gids": <roce_gid_facts result>,
                    "node": <doctor_facts result>, "leftovers": <leftover_processes result>,
                    "memory": <memory_report result>, "disk": <free_space result>,
                    "api": {"health": {"status": 200, "seconds": 0.01},
                            "models": {"rc": 0, "stdout": "serving: ...", "seconds": 0.2},
                            "completion": {"rc": 0, "stdout": "serving: ...", "seconds": 1.3}}},
     "spark-worker": {...}}

and the run's ``context`` (the head, the level, the checks chosen, the thresholds; see ``report``). Every
check yields one verdict per node: ``{"host", "check", "class", "status": PASS|WARN|FAIL, "evidence",
"remedy"}`` (remedy "" for PASS). A probe that failed is evidence, never a stop: its check FAILs with the
probe's message. Parity checks compare each node with the head: a difference names both values and both nodes,
and FAILs on the node that differs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, Dict, List, Mapping

from ansible_collections.dgxspark.cluster.plugins.module_utils.firmware import failed_attempts, nic_text, nic_versions, summary

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
CLASSES = ("fabric", "nccl", "gpu", "platform", "parity", "checkpoint", "serving")

# name -> (class, remedy). The order is the report's order.
CHECKS = {
    "fabric-links": ("fabric", "Seat the QSFP cable with both nodes powered off and check ibstat/ethtool on the node; "
                               "the rail must be Up/Active at 200000 Mb/s on a 32.0 GT/s x4 PCIe link (site.yml --tags nic "
                               "re-checks it)."),
    "fabric-mtu": ("fabric", "Set MTU 9000 on this rail's netdev on both nodes (the netplan/NetworkManager profile of the "
                             "rail), then re-run doctor."),
    "fabric-gid-index": ("fabric", "Restart the serving unit (its ExecStartPre dgxspark-nccl-env rewrites /run/dgxspark/"
                                   "nccl.env from the live GID table), or re-run site.yml, which does it."),
    "fabric-bandwidth": ("fabric", "Reboot the slow node with the cables seated (site.yml with nic_reboot_ok: true does "
                                   "it in order); still slow: power both nodes off, AC removed for at least 60 s."),
    "nccl-allreduce": ("nccl", "Reboot both nodes with the cables seated; still slow with the fabric healthy: power both "
                               "nodes off with AC removed for at least 60 s (a power-delivery fault shows only in the "
                               "all-reduce); an init error names NCCL's cause: fix it (usually the GID index or "
                               "NCCL_IB_HCA) and run doctor at full level with the units stopped (stop.yml) again."),
    "gpu-driver": ("gpu", "Reboot the node so the loaded kernel module matches the installed userspace driver (site.yml "
                          "with driver_reboot_ok: true does it)."),
    "gpu-cuinit": ("gpu", "CUDA does not initialise through the runtime although the driver may answer: read the "
                          "error (803: module and userspace differ, reboot; 999 unknown: load nvidia-uvm with "
                          "nvidia-modprobe -u -c 0 or reboot; no device: check CUDA_VISIBLE_DEVICES in vllm.env)."),
    "gpu-clock-cap": ("gpu", "Start dgxspark-clock-cap.service again (systemctl restart dgxspark-clock-cap) and read "
                             "its status in /run/dgxspark/clock-cap.status, or re-run site.yml."),
    "gpu-persistence": ("gpu", "Enable persistence mode (nvidia-persistenced.service, or nvidia-smi -pm 1) so the "
                               "driver stays initialised between runs."),
    "platform-kernel": ("platform", "Install the NVIDIA module build for the running kernel or boot the kernel that has "
                                    "one (site.yml's driver role names the build)."),
    "platform-held": ("platform", "Re-run site.yml so the driver role holds and pins the driver and kernel packages "
                                  "again before any apt upgrade."),
    "platform-earlyoom": ("platform", "Stop, disable and mask earlyoom.service (site.yml with preflight_earlyoom: "
                                      "disable does it): it kills vLLM under deep context."),
    "platform-leftovers": ("platform", "Stop the leftover processes named in the evidence (systemctl stop <unit>, "
                                       "docker stop), or run site.yml with preflight_stop_leftovers: true."),
    "platform-memory": ("platform", "Free memory before the next start: stop what the evidence names, drop the page "
                                    "cache of the checkpoint (site.yml's checkpoint role does), then start the unit."),
    "platform-disk": ("platform", "Free space on the checkpoint cache's filesystem (old revisions: "
                                  "checkpoint_old_revisions: remove)."),
    "parity-driver": ("parity", "Run site.yml so every node converges to the same driver (driver role), then reboot "
                                "the node that differs."),
    "parity-cuda": ("parity", "Run site.yml so every node has the same CUDA toolkit (cuda role)."),
    "parity-runtime": ("parity", "Run site.yml so every node runs the same vLLM and torch (venv) or image id "
                                 "(container) (runtime role)."),
    "parity-vllm-env": ("parity", "Run site.yml to render the same /etc/dgxspark/vllm.env on every node (a host_vars "
                                  "override of runtime_vllm_env is the usual cause)."),
    "parity-unit-argv": ("parity", "Run site.yml so every node's serving unit runs the same command line (runtime and "
                                   "service roles)."),
    "parity-recipe": ("parity", "Run site.yml so every node checks out the same DSpark recipe commit "
                                "(runtime_recipe_version, runtime role): the recipe's patches and launcher build the "
                                "engine each rank runs."),
    "parity-checkpoint": ("parity", "Run site.yml so the checkpoint role syncs and verifies the same revision on "
                                    "every node."),
    "parity-cache-paths": ("parity", "Set checkpoint_cache_dir and runtime_cache_dir in group_vars, not per host: "
                                     "every rank must find the same paths."),
    "parity-firmware": ("parity", "Bring the nodes to the same ConnectX-7 firmware with NVIDIA's tools (the DGX OS "
                                  "firmware update, or mlxfwmanager), one node at a time, then reboot it: the "
                                  "collection reports firmware and never updates it."),
    "parity-system-firmware": ("parity", "Bring the nodes to the same system firmware with fwupdmgr (DGX OS's update "
                                         "path), one node at a time, with AC power connected; an update that did not "
                                         "apply names its status in the evidence. The collection never updates firmware."),
    "checkpoint-record": ("checkpoint", "Run site.yml so the checkpoint role verifies the pinned revision on every "
                                        "node and writes the record."),
    "checkpoint-offline": ("checkpoint", "Run site.yml after the checkpoint verified on every node: it turns "
                                         "HF_HUB_OFFLINE=1 on in vllm.env."),
    "checkpoint-unfinished": ("checkpoint", "Re-run site.yml so the checkpoint role finishes the download or sync "
                                            "and verifies it."),
    "serving-unit": ("serving", "Read the first error in the evidence (journalctl -u the unit), fix its cause, then "
                                "systemctl reset-failed and start it (site.yml does both)."),
    "serving-health": ("serving", "Read the head's unit log for the API server's error, then restart the serving "
                                  "units (site.yml)."),
    "serving-models": ("serving", "Check runtime_vllm_served_model_name and runtime_vllm_max_model_len against what "
                                  "the head serves, then re-run site.yml."),
    "serving-completion": ("serving", "An engine that lists the model but does not answer lost a rank: read every "
                                      "node's unit log (first error), then restart the units (site.yml with "
                                      "service_restart_hung: true)."),
}

# The checks run only at the full level (measurements).
FULL_ONLY = ("fabric-bandwidth", "nccl-allreduce")
# The checks made only on the head (the API is served there).
HEAD_ONLY = ("serving-health", "serving-models", "serving-completion")


def checks_for(classes, level):
    """The check names for the chosen classes and level, in report order.

    >>> checks_for(["fabric"], "quick")
    ['fabric-links', 'fabric-mtu', 'fabric-gid-index']
    >>> 'fabric-bandwidth' in checks_for(["fabric"], "full")
    True
    """
    wanted = set(classes or CLASSES)
    return [name for name, (klass, _remedy) in CHECKS.items()
            if klass in wanted and (level == "full" or name not in FULL_ONLY)]


def verdict(host, check, status, evidence, remedy=None):
    """One verdict; the remedy is the check's own for WARN and FAIL (or REMEDY, for a check that did not run)."""
    klass, own = CHECKS[check]
    return {"host": host, "check": check, "class": klass, "status": status, "evidence": evidence,
            "remedy": "" if status == PASS else (remedy or own)}


NOT_MEASURED = ("Stop the serving units (stop.yml), run doctor.yml with doctor_level: full so the all-reduce runs, "
                "then start them again (site.yml).")


def _probe_error(result):
    """The message of a probe that failed (a module result), else ""."""
    if not isinstance(result, Mapping):
        return "not read"
    if result.get("failed") or result.get("unreachable"):
        return str(result.get("msg") or "failed").strip()
    if result.get("skipped"):
        return "skipped: %s" % (result.get("skip_reason") or "")
    return ""


def _links(probe):
    return ((probe.get("links") or {}).get("ansible_facts") or {}).get("fabric_links") or []


def fabric_links(host, probe, ctx):
    error = _probe_error(probe.get("links"))
    if error:
        return verdict(host, "fabric-links", FAIL, "fabric_link_facts failed: %s" % error)
    links = _links(probe)
    if not links:
        return verdict(host, "fabric-links", FAIL, "no rail read")
    parts, problems = [], []
    for link in links:
        parts.append("%s %s/%s %s Mb/s PCIe %s x%s" % (
            link.get("netdev"), link.get("carrier"), link.get("state"), link.get("speed_mbps"),
            (link.get("pcie_link_speed") or "?").replace(" PCIe", ""), link.get("pcie_link_width")))
        problems.extend(p for p in link.get("problems") or [] if "MTU" not in p and "mtu" not in p)
    if problems:
        return verdict(host, "fabric-links", FAIL, "; ".join(problems))
    return verdict(host, "fabric-links", PASS, ", ".join(parts))


def fabric_mtu(host, probe, ctx):
    """Each rail's MTU on this node, and the peer end's (the same rail index on the other nodes)."""
    want = int(ctx.get("mtu") or 9000)
    mine = _links(probe)
    if not mine:
        return verdict(host, "fabric-mtu", FAIL, "no rail read: %s" % (_probe_error(probe.get("links")) or "empty"))
    wrong, parts = [], []
    for index, link in enumerate(mine):
        peers = []
        for other, oprobe in sorted((ctx.get("probes") or {}).items()):
            if other == host:
                continue
            olinks = _links(oprobe)
            if index < len(olinks):
                peers.append("%s %s" % (other, olinks[index].get("mtu")))
        parts.append("%s MTU %s (peer: %s)" % (link.get("netdev"), link.get("mtu"), ", ".join(peers) or "none read"))
        if link.get("mtu") != want:
            peer_text = ", ".join(peers) or "none read"
            wrong.append("%s MTU %s, expected %d (peer: %s)" % (link.get("netdev"), link.get("mtu"), want, peer_text))
    if wrong:
        return verdict(host, "fabric-mtu", FAIL, "; ".join(wrong))
    return verdict(host, "fabric-mtu", PASS, "; ".join(parts))


def fabric_gid_index(host, probe, ctx):
    gids = probe.get("gids") or {}
    error = _probe_error(gids)
    env = (probe.get("node") or {}).get("nccl_env")
    unit_active = ((probe.get("node") or {}).get("unit") or {}).get("ActiveState") == "active"
    if error:
        return verdict(host, "fabric-gid-index", FAIL, "the live GID table gives no index: %s" % error)
    live = gids.get("gid_index")
    if env is None:
        status = FAIL if unit_active else WARN
        return verdict(host, "fabric-gid-index", status, "/run/dgxspark/nccl.env missing (unit %s); live RoCE v2 "
                       "index %s" % ("active" if unit_active else "not running", live))
    used = env.get("NCCL_IB_GID_INDEX")
    hca = env.get("NCCL_IB_HCA", "")
    devices = [r.get("device") for r in gids.get("rails") or []]
    missing = [d for d in devices if d and d not in hca]
    if live is None:
        return verdict(host, "fabric-gid-index", PASS if not missing else FAIL,
                       "NCCL selects the GID (nic_nccl_gid_auto); nccl.env NCCL_IB_HCA=%s" % hca)
    if str(used) != str(live) or missing:
        return verdict(host, "fabric-gid-index", FAIL,
                       "nccl.env NCCL_IB_GID_INDEX=%s NCCL_IB_HCA=%s, the live table: index %s on %s"
                       % (used, hca, live, ",".join(devices)))
    return verdict(host, "fabric-gid-index", PASS, "nccl.env NCCL_IB_GID_INDEX=%s = the live RoCE v2 index on %s"
                   % (used, ",".join(devices)))


def fabric_bandwidth(host, probe, ctx):
    """The measured figures where this node sends (client) or receives (server); a pair cannot tell which end."""
    measured = ctx.get("bandwidth")
    floor = float(ctx.get("bandwidth_floor_gbps") or 80)
    if measured is None:
        return verdict(host, "fabric-bandwidth", WARN, "not measured (%s)" % (ctx.get("bandwidth_reason") or "no plan"))
    mine = [m for m in measured if host in (m.get("client"), m.get("server"))]
    if not mine:
        return verdict(host, "fabric-bandwidth", WARN, "no measurement involves this node")
    parts, slow = [], []
    for m in mine:
        label = "rail %s (%s) %s -> %s" % (m.get("rail"), m.get("netdev"), m.get("client"), m.get("server"))
        if m.get("gbps") is None:
            slow.append("%s: %s" % (label, m.get("error") or "no figure"))
            continue
        text = "%s %.2f Gb/s" % (label, float(m["gbps"]))
        parts.append(text)
        if float(m["gbps"]) < floor:
            slow.append(text)
    if slow:
        return verdict(host, "fabric-bandwidth", FAIL, "below %g Gb/s: %s" % (floor, "; ".join(slow)))
    return verdict(host, "fabric-bandwidth", PASS, "%s (healthy >= %g Gb/s)" % (", ".join(parts), floor))


def collective_result(result):
    """The JSON line dgxspark_collective.py printed, from its command's result; else {"ok": False, "error": ...}.

    >>> collective_result({"rc": 0, "stdout": 'x\\n{"ok": true, "busbw_gbs": 21.6}'})["busbw_gbs"]
    21.6
    >>> collective_result({"rc": 1, "stdout": "", "stderr": "Failed to start transient service unit"})["error"]
    'exit 1: Failed to start transient service unit'
    """
    if not isinstance(result, Mapping):
        return {"ok": False, "error": "not run"}
    if result.get("skipped"):
        return {"ok": False, "error": "skipped: %s" % (result.get("skip_reason") or "")}
    for line in reversed(str(result.get("stdout") or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    text = " ".join(str(result.get(k) or "").strip() for k in ("stderr", "msg")).strip()
    return {"ok": False, "error": "exit %s: %s" % (result.get("rc"), text[-600:] or "no output")}


def nccl_allreduce(host, probe, ctx):
    """The all-reduce every node ran at once (dgxspark_collective.py allreduce), judged on the bus bandwidth."""
    if ctx.get("nccl_reason"):
        return verdict(host, "nccl-allreduce", WARN, "not measured: %s" % ctx["nccl_reason"], NOT_MEASURED)
    data = collective_result(probe.get("allreduce"))
    floor = float(ctx.get("nccl_floor_gbs") or 0)
    if not data.get("ok"):
        return verdict(host, "nccl-allreduce", FAIL, "rank %s of %s, %s: %s" % (
            data.get("rank", "?"), data.get("world_size", "?"), data.get("stage", "run"), data.get("error")))
    evidence = ("rank %s of %s: %d MiB x %s, %.1f us per all-reduce, algbw %.2f GB/s, busbw %.2f GB/s (NCCL %s, torch %s)"
                % (data.get("rank"), data.get("world_size"), int(data.get("bytes") or 0) >> 20, data.get("iters"),
                   float(data.get("time_us") or 0), float(data.get("algbw_gbs") or 0), float(data.get("busbw_gbs") or 0),
                   data.get("nccl") or "?", data.get("torch") or "?"))
    if data.get("wrong"):
        return verdict(host, "nccl-allreduce", FAIL, evidence + "; the sum read back wrong")
    if float(data.get("busbw_gbs") or 0) < floor:
        return verdict(host, "nccl-allreduce", FAIL, "%s, below the floor %g GB/s (doctor_nccl_min_busbw_gbps)"
                       % (evidence, floor))
    return verdict(host, "nccl-allreduce", PASS, "%s (floor %g GB/s)" % (evidence, floor))


def gpu_cuinit(host, probe, ctx):
    """CUDA initialised through the runtime's torch (dgxspark_collective.py cuinit) as the unit's user."""
    if ctx.get("cuinit_reason"):
        return verdict(host, "gpu-cuinit", WARN, "not run: %s" % ctx["cuinit_reason"])
    ran = probe.get("cuinit")
    node = probe.get("node") or {}
    if (not isinstance(ran, Mapping) or ran.get("skipped")) and isinstance(node, Mapping) and not node.get("unit_exec"):
        return verdict(host, "gpu-cuinit", FAIL, "not run: no serving unit to run the runtime's Python as (%s"
                       % ("doctor_facts failed: %s)" % _probe_error(node) if _probe_error(node)
                          else "its unit file names no ExecStart; site.yml installs the runtime and the unit)"))
    data = collective_result(ran)
    if not data.get("ok"):
        return verdict(host, "gpu-cuinit", FAIL, "%s: %s" % (data.get("stage", "run"), data.get("error")))
    return verdict(host, "gpu-cuinit", PASS, "CUDA initialised through the runtime: %s device(s), %s (torch %s, CUDA %s)"
                   % (data.get("devices"), data.get("name"), data.get("torch") or "?", data.get("cuda") or "?"))


_MISMATCH = "Driver/library version mismatch"


def gpu_driver(host, probe, ctx):
    node = probe.get("node") or {}
    error = _probe_error(node)
    if error:
        return verdict(host, "gpu-driver", FAIL, "doctor_facts failed: %s" % error)
    smi = node.get("nvidia_smi") or {}
    loaded, installed = node.get("loaded_driver") or "", node.get("installed_driver") or ""
    text = (smi.get("output") or "").strip()
    if _MISMATCH in text or (loaded and installed and loaded != installed):
        return verdict(host, "gpu-driver", FAIL, "loaded kernel module %s, installed userspace %s; nvidia-smi: %s"
                       % (loaded or "none", installed or "none", text.splitlines()[0] if text else "rc %s" % smi.get("rc")))
    if smi.get("rc") != 0:
        return verdict(host, "gpu-driver", FAIL, "nvidia-smi exited %s: %s" % (smi.get("rc"), text[-200:]))
    if not loaded:
        return verdict(host, "gpu-driver", FAIL, "no NVIDIA kernel module loaded (installed userspace %s)" % installed)
    return verdict(host, "gpu-driver", PASS, "loaded module %s = installed userspace %s; nvidia-smi answers"
                   % (loaded, installed or "?"))


def _gpu_field(node, key):
    return ((node.get("nvidia_smi") or {}).get("fields") or {}).get(key)


def gpu_clock_cap(host, probe, ctx):
    node = probe.get("node") or {}
    if not ctx.get("clock_cap_enabled", True):
        return verdict(host, "gpu-clock-cap", PASS, "clock_cap_enabled is false: no cap expected")
    cap = int(ctx.get("clock_cap_max_mhz") or 0)
    status = (node.get("clock_cap_status") or "").strip()
    smi = node.get("nvidia_smi") or {}
    if smi.get("rc") != 0 and status.startswith("capped"):
        return verdict(host, "gpu-clock-cap", WARN, "not read: nvidia-smi failed (gpu-driver); status: %s" % status)
    try:
        sm = int(float(_gpu_field(node, "clocks.sm")))
    except (TypeError, ValueError):
        sm = None
    evidence = "status: %s; SM clock %s MHz, cap %d MHz" % (status or "missing", "?" if sm is None else sm, cap)
    if not status.startswith("capped"):
        return verdict(host, "gpu-clock-cap", FAIL, evidence)
    if sm is None or sm > cap:
        return verdict(host, "gpu-clock-cap", FAIL, evidence + " (read back above the cap: the lock is lost)")
    return verdict(host, "gpu-clock-cap", PASS, evidence)


def gpu_persistence(host, probe, ctx):
    node = probe.get("node") or {}
    mode = _gpu_field(node, "persistence_mode")
    if (node.get("nvidia_smi") or {}).get("rc") != 0:
        return verdict(host, "gpu-persistence", WARN, "not read: nvidia-smi failed (gpu-driver)")
    if mode is None:
        return verdict(host, "gpu-persistence", FAIL, "nvidia-smi gave no persistence_mode")
    status = PASS if str(mode).strip().lower() == "enabled" else WARN
    return verdict(host, "gpu-persistence", status, "persistence mode %s" % mode)


def platform_kernel(host, probe, ctx):
    node = probe.get("node") or {}
    kernel = node.get("kernel") or "?"
    builds = node.get("module_builds") or []
    if not builds:
        return verdict(host, "platform-kernel", FAIL, "kernel %s has no NVIDIA module build installed" % kernel)
    return verdict(host, "platform-kernel", PASS, "kernel %s, module %s" % (kernel, ", ".join(builds)))


def platform_held(host, probe, ctx):
    node = probe.get("node") or {}
    moves = node.get("upgrade_moves") or []
    unheld = node.get("unheld_driver_packages") or []
    if moves:
        return verdict(host, "platform-held", FAIL, "apt-get upgrade would move %s" % ", ".join(
            "%s %s" % (m.get("package"), m.get("version")) for m in moves))
    if unheld:
        return verdict(host, "platform-held", WARN, "not held: %s" % ", ".join(unheld))
    return verdict(host, "platform-held", PASS, "%d driver and kernel packages held; apt-get upgrade moves none of them"
                   % len(node.get("held") or []))


def platform_earlyoom(host, probe, ctx):
    unit = (probe.get("node") or {}).get("earlyoom") or {}
    load, active = unit.get("LoadState", "?"), unit.get("ActiveState", "?")
    evidence = "earlyoom.service LoadState=%s ActiveState=%s UnitFileState=%s" % (
        load, active, unit.get("UnitFileState", ""))
    if active in ("active", "activating"):
        return verdict(host, "platform-earlyoom", WARN if ctx.get("earlyoom_allowed") else FAIL, evidence)
    return verdict(host, "platform-earlyoom", PASS, evidence)


def platform_leftovers(host, probe, ctx):
    result = probe.get("leftovers") or {}
    error = _probe_error(result)
    if error:
        return verdict(host, "platform-leftovers", FAIL, "leftover_processes failed: %s" % error)
    found = result.get("summary") or []
    if found:
        return verdict(host, "platform-leftovers", FAIL, "; ".join(found))
    return verdict(host, "platform-leftovers", PASS, "no vLLM, Ray or EngineCore outside the unit; the serving ports free")


def platform_memory(host, probe, ctx):
    result = probe.get("memory") or {}
    error = _probe_error(result)
    if error:
        return verdict(host, "platform-memory", FAIL, "memory_report failed: %s" % error)
    msg = result.get("msg") or ("MemAvailable %s MiB" % result.get("available_mb"))
    if not result.get("checked"):
        return verdict(host, "platform-memory", PASS, "%s (%s)" % (msg, result.get("reason") or "not checked"))
    return verdict(host, "platform-memory", PASS if result.get("ok") else FAIL, msg)


def platform_disk(host, probe, ctx):
    result = probe.get("disk") or {}
    error = _probe_error(result)
    if error:
        return verdict(host, "platform-disk", FAIL, "free_space failed: %s" % error)
    free_gb = float(result.get("free_bytes") or 0) / 1e9
    floor = float(ctx.get("min_free_disk_gb") or 0)
    evidence = "%.1f GB free on %s (least %g GB)" % (free_gb, result.get("checked"), floor)
    return verdict(host, "platform-disk", PASS if free_gb >= floor else WARN, evidence)


def _node(probe):
    return probe.get("node") or {}


# parity item -> how to read it from a node's probe
PARITY = {
    "parity-driver": lambda p, c: _node(p).get("loaded_driver") or _node(p).get("installed_driver") or "",
    "parity-cuda": lambda p, c: _node(p).get("cuda") or "",
    "parity-runtime": lambda p, c: _node(p).get("runtime_version") or "",
    "parity-vllm-env": lambda p, c: _node(p).get("vllm_env_digest") or "",
    "parity-unit-argv": lambda p, c: _node(p).get("unit_argv_digest") or "",
    "parity-recipe": lambda p, c: _node(p).get("recipe_commit") or "",
    "parity-checkpoint": lambda p, c: _record_key(_node(p).get("checkpoint_record")),
    "parity-cache-paths": lambda p, c: p.get("cache_paths") or "",
    "parity-firmware": lambda p, c: nic_text(nic_versions(_links(p)), compact=True),
    "parity-system-firmware": lambda p, c: _system_firmware(p.get("firmware")),
}
# a difference of these is reported (WARN), not failed: nothing the collection converges
PARITY_WARN_ONLY = ("parity-firmware", "parity-system-firmware")


def _system_firmware(result):
    """The node's ESRT as 'system firmware 65539 (<class>), ...' plus any update that did not apply; '' unread."""
    if not isinstance(result, Mapping) or result.get("failed") or result.get("skipped") or "esrt" not in result:
        return ""
    entries = result.get("esrt")
    if entries is None:
        return "no ESRT exported"
    text = ", ".join("%s (%s)" % (version, fw_class) for fw_class, version in sorted((summary(entries) or {}).items()))
    failed = failed_attempts(None, entries)
    return "; ".join([text] + failed if text else failed) or "an empty ESRT"


def _record_key(record):
    if not isinstance(record, Mapping) or not record:
        return ""
    return "%s@%s fingerprint %s" % (record.get("repo_id") or record.get("repo"), record.get("revision"),
                                     str(record.get("fingerprint") or "")[:16])


def parity(check, host, probes, ctx):
    """The node against the head: equal -> PASS; different -> FAIL naming both values and nodes; unread -> WARN."""
    head = ctx["head"]
    read = PARITY[check]
    mine = read(probes.get(host) or {}, ctx)
    theirs = read(probes.get(head) or {}, ctx)
    if check == "parity-recipe" and not mine and not any(read(p or {}, ctx) for p in probes.values()):
        return verdict(host, check, PASS, "no recipe checkout on any node (venv runtime, or runtime_recipe_startup false)")
    if not mine:
        return verdict(host, check, WARN, "not compared: nothing read on %s (not installed, rendered or recorded)" % host)
    if host == head:
        others = [h for h in sorted(probes) if h != head]
        return verdict(host, check, PASS, "%s (the reference; compared with %s)" % (mine, ", ".join(others) or "none"))
    if mine != theirs:
        evidence = "%s has %s, %s has %s" % (host, mine, head, theirs or "nothing read")
        if check == "parity-vllm-env":
            evidence += env_differences(host, _node(probes.get(host) or {}).get("vllm_env"),
                                        head, _node(probes.get(head) or {}).get("vllm_env"))
        return verdict(host, check, WARN if check in PARITY_WARN_ONLY else FAIL, evidence)
    return verdict(host, check, PASS, "%s, as on %s" % (mine, head))


def env_differences(host, mine, head, theirs, limit=5):
    """The keys two nodes' vllm.env (non-secret: the key lives in its own file) disagree on, with both values.

    >>> env_differences("w", {"A": "1", "B": "2"}, "h", {"B": "3", "C": "4"})
    ': A (w 1, h unset), B (w 2, h 3), C (w unset, h 4)'
    """
    if not isinstance(mine, Mapping) or not isinstance(theirs, Mapping):
        return ""
    keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    shown = ["%s (%s %s, %s %s)" % (k, host, mine.get(k, "unset"), head, theirs.get(k, "unset")) for k in keys[:limit]]
    if len(keys) > limit:
        shown.append("and %d more" % (len(keys) - limit))
    return (": " + ", ".join(shown)) if shown else ""


def checkpoint_record(host, probe, ctx):
    record = _node(probe).get("checkpoint_record")
    want_repo, want_rev = ctx.get("model") or "", ctx.get("revision") or ""
    if not isinstance(record, Mapping) or not record:
        return verdict(host, "checkpoint-record", FAIL, "no verify record (%s)" % ctx.get("record_path", "record"))
    repo = record.get("repo_id") or record.get("repo")
    revision = record.get("revision")
    evidence = "record: %s@%s verified on %s" % (repo, revision, ", ".join(record.get("hosts") or []) or "every node")
    if (want_repo and repo != want_repo) or (want_rev and revision != want_rev):
        return verdict(host, "checkpoint-record", FAIL, "%s, expected %s@%s" % (evidence, want_repo, want_rev or "any"))
    return verdict(host, "checkpoint-record", PASS, evidence)


def checkpoint_offline(host, probe, ctx):
    env = _node(probe).get("vllm_env")
    if env is None:
        return verdict(host, "checkpoint-offline", WARN, "no vllm.env rendered on the node")
    value = env.get("HF_HUB_OFFLINE")
    if value == "1":
        return verdict(host, "checkpoint-offline", PASS, "vllm.env HF_HUB_OFFLINE=1")
    return verdict(host, "checkpoint-offline", WARN, "vllm.env HF_HUB_OFFLINE=%s: a start asks the hub" % value)


def checkpoint_unfinished(host, probe, ctx):
    node = _node(probe)
    found = node.get("incomplete_files")
    if found is None:
        return verdict(host, "checkpoint-unfinished", WARN, "the cache repo %s was not found" % node.get("repo_dir"))
    if found:
        return verdict(host, "checkpoint-unfinished", FAIL, "%d unfinished file(s): %s" % (
            len(found), ", ".join(found[:5])))
    return verdict(host, "checkpoint-unfinished", PASS, "no *.incomplete under %s" % node.get("repo_dir"))


def serving_unit(host, probe, ctx):
    node = _node(probe)
    unit = node.get("unit") or {}
    active, sub, result = unit.get("ActiveState", "?"), unit.get("SubState", "?"), unit.get("Result", "?")
    evidence = "%s ActiveState=%s SubState=%s Result=%s NRestarts=%s" % (
        ctx.get("unit_name", "unit"), active, sub, result, unit.get("NRestarts", "?"))
    first = node.get("first_error") or ""
    if active != "active" or result not in ("success", "?"):
        if result == "start-limit-hit":
            evidence += " (start-limit-hit: systemd stopped restarting it)"
        return verdict(host, "serving-unit", FAIL, evidence + ("; first error: %s" % first if first else ""))
    return verdict(host, "serving-unit", PASS, evidence)


def _api(probe, key):
    return ((probe.get("api") or {}).get(key)) or {}


def serving_health(host, probe, ctx):
    res = _api(probe, "health")
    status, seconds = res.get("status"), res.get("seconds")
    evidence = "/health %s in %s s" % (status if status not in (None, -1) else res.get("msg", "no answer"), seconds)
    return verdict(host, "serving-health", PASS if status == 200 else FAIL, evidence)


def seconds(delta):
    """A command's ``delta`` (``0:00:01.250000``) in seconds, None when unreadable.

    >>> seconds("0:01:02.500000")
    62.5
    """
    try:
        hours, minutes, secs = str(delta).split(":")
        return round(int(hours) * 3600 + int(minutes) * 60 + float(secs), 3)
    except ValueError:
        return None


def _script(host, probe, key, check, what):
    res = _api(probe, key)
    out = (res.get("stdout") or res.get("msg") or "").strip()
    took = res.get("seconds") if res.get("seconds") is not None else seconds(res.get("delta"))
    evidence = "%s in %s s: %s" % (what, took, out or "no output")
    return verdict(host, check, PASS if res.get("rc") == 0 else FAIL, evidence)


def serving_models(host, probe, ctx):
    return _script(host, probe, "models", "serving-models", "/v1/models")


def serving_completion(host, probe, ctx):
    return _script(host, probe, "completion", "serving-completion", "1-token completion + chat completion")


NODE_CHECKS = {
    "fabric-links": fabric_links, "fabric-mtu": fabric_mtu, "fabric-gid-index": fabric_gid_index,
    "fabric-bandwidth": fabric_bandwidth, "nccl-allreduce": nccl_allreduce,
    "gpu-driver": gpu_driver, "gpu-cuinit": gpu_cuinit, "gpu-clock-cap": gpu_clock_cap, "gpu-persistence": gpu_persistence,
    "platform-kernel": platform_kernel, "platform-held": platform_held, "platform-earlyoom": platform_earlyoom,
    "platform-leftovers": platform_leftovers, "platform-memory": platform_memory, "platform-disk": platform_disk,
    "checkpoint-record": checkpoint_record, "checkpoint-offline": checkpoint_offline,
    "checkpoint-unfinished": checkpoint_unfinished,
    "serving-unit": serving_unit, "serving-health": serving_health, "serving-models": serving_models,
    "serving-completion": serving_completion,
}


def report(probes, context):
    """Every chosen check on every node: ``{"results": [...], "lines": [...], "failed": [...], "counts": {...}}``.

    ``context``: ``{"head": name, "hosts": [names, inventory order], "level": "quick"|"full", "classes": [...],
    "mtu": 9000, "bandwidth": [measurements] or None, "bandwidth_floor_gbps": 80, "clock_cap_enabled": bool,
    "clock_cap_max_mhz": 2100, "earlyoom_allowed": bool, "min_free_disk_gb": 50, "model": repo id,
    "revision": sha, "unit_name": ...}``. A node without a probe (unreachable)
    FAILs every check with "not read".
    """
    ctx = dict(context or {})
    ctx["probes"] = probes or {}
    hosts = list(ctx.get("hosts") or sorted(ctx["probes"]))
    head = ctx.get("head") or (hosts[0] if hosts else "")
    ctx["head"] = head
    names = checks_for(ctx.get("classes"), ctx.get("level") or "quick")
    results = []  # type: List[Dict[str, Any]]
    for check in names:
        for host in hosts:
            if check in HEAD_ONLY and host != head:
                continue
            probe = ctx["probes"].get(host)
            if not isinstance(probe, Mapping):
                results.append(verdict(host, check, FAIL, "not read (the node did not answer)"))
            elif check in PARITY:
                results.append(parity(check, host, ctx["probes"], ctx))
            else:
                results.append(NODE_CHECKS[check](host, probe, ctx))
    counts = {status: sum(1 for r in results if r["status"] == status) for status in (PASS, WARN, FAIL)}
    return {"results": results, "lines": lines(results), "counts": counts,
            "failed": ["%s %s" % (r["host"], r["check"]) for r in results if r["status"] == FAIL]}


def lines(results):
    """The report as text lines: ``STATUS host check: evidence`` and, for WARN/FAIL, ``  remedy: ...``."""
    out = []
    for r in results:
        out.append("%s %s %s: %s" % (r["status"], r["host"], r["check"], r["evidence"]))
        if r["remedy"]:
            out.append("    remedy: %s" % r["remedy"])
    return out


_ENV_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_env(text):
    """``KEY=value`` lines of an EnvironmentFile (comments, blanks skipped, one pair of quotes removed).

    >>> parse_env('# x\\nA=1\\nB="two words"\\n')
    {'A': '1', 'B': 'two words'}
    """
    env = {}  # type: Dict[str, str]
    for line in (text or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ENV_RE.match(line)
        if not match:
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[match.group(1)] = value
    return env


def parse_query_gpu(fields, text):
    """``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` -> {field: value} of the first GPU.

    >>> parse_query_gpu(["clocks.sm", "persistence_mode"], "2080, Enabled\\n")
    {'clocks.sm': '2080', 'persistence_mode': 'Enabled'}
    """
    for line in (text or "").splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(fields):
            return dict(zip(fields, values))
    return {}


def normalise_argv(argv, rank_options=("--node-rank", "--headless", "--data-parallel-rank")):
    """The command line without what differs by rank by design (``--node-rank N``, ``--headless``).

    >>> normalise_argv(["vllm", "serve", "m", "--node-rank", "1", "--headless", "--port", "8888"])
    ['vllm', 'serve', 'm', '--port', '8888']
    """
    out, skip = [], False
    for word in argv or []:
        if skip:
            skip = False
            continue
        if word in ("--headless",):
            continue
        if word in rank_options:
            skip = True
            continue
        if any(word.startswith(opt + "=") for opt in rank_options):
            continue
        out.append(word)
    return out


def _joined(unit_text):
    """A unit file's text with its continuation lines (a trailing backslash) joined."""
    return re.sub(r"\\\n", " ", unit_text or "")


def exec_start_words(unit_text):
    """The ExecStart= words of a unit file, continuation lines joined, its prefixes (-+@!:) dropped.

    >>> exec_start_words('[Service]\\nExecStart=/v/bin/vllm "serve" \\\\\\n "m" --port 1\\n')
    ['/v/bin/vllm', 'serve', 'm', '--port', '1']
    """
    words = []  # type: List[str]
    for line in _joined(unit_text).splitlines():
        if line.startswith("ExecStart="):
            try:
                words.extend(shlex.split(line[len("ExecStart="):].lstrip("-+@!:")))
            except ValueError:
                words.extend(line.split())
    return words


def unit_exec(unit_text):
    """What the serving unit runs and how, from its unit file: ``{"user", "group", "working_directory",
    "environment_files": [[path, optional]], "argv": [...], "python", "node_rank", "nnodes", "master_addr",
    "master_port"}`` (the venv kind's ``Type=exec`` unit: ``ExecStart=`` is ``<venv>/bin/vllm serve ...``), {}
    without an ExecStart.

    >>> u = unit_exec("[Service]\\nUser=vllm\\nEnvironmentFile=-/etc/a.env\\nEnvironmentFile=/run/n.env\\n"
    ...               "ExecStart=/opt/v/bin/vllm serve m --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 "
    ...               "--master-port 29501 --headless\\n")
    >>> u["environment_files"], u["python"], u["node_rank"], u["master_port"]
    ([['/etc/a.env', True], ['/run/n.env', False]], '/opt/v/bin/python', 1, 29501)
    """
    out = {"user": "", "group": "", "working_directory": "", "environment_files": [],
           "argv": exec_start_words(unit_text)}  # type: Dict[str, Any]
    for line in _joined(unit_text).splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep:
            continue
        value = value.strip()
        if key == "User":
            out["user"] = value
        elif key == "Group":
            out["group"] = value
        elif key == "WorkingDirectory":
            out["working_directory"] = value
        elif key == "EnvironmentFile":
            out["environment_files"].append([value.lstrip("-"), value.startswith("-")])
    if not out["argv"]:
        return {}
    argv = out["argv"]
    options = {}
    for i, word in enumerate(argv):
        name, eq, val = word.partition("=")
        if name in ("--nnodes", "--node-rank", "--master-addr", "--master-port"):
            options[name] = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    out["python"] = os.path.join(os.path.dirname(argv[0]), "python") if os.path.isabs(argv[0]) else ""
    for key, opt, conv in (("node_rank", "--node-rank", int), ("nnodes", "--nnodes", int),
                           ("master_addr", "--master-addr", str), ("master_port", "--master-port", int)):
        try:
            out[key] = conv(options[opt]) if opt in options else None
        except ValueError:
            out[key] = None
    if out["nnodes"] == 1 or (out["nnodes"] is None and out["node_rank"] is None):
        out["node_rank"], out["nnodes"] = 0 if out["node_rank"] is None else out["node_rank"], out["nnodes"] or 1
    return out


def collective_argv(unit, script, command, unit_name, timeout, size_mb=256, warmup=5, iters=20, skip_files=()):
    """systemd-run argv that runs dgxspark_collective.py COMMAND as the serving unit's user, in its environment
    files (less SKIP_FILES: the API key's, which neither CUDA nor NCCL reads), bounded by RuntimeMaxSec (a
    transient unit, collected when it ends); [] when the unit is not a venv
    kind's (no Python beside its ExecStart) or, for allreduce, names no rank, node count or master.

    >>> u = {"user": "vllm", "group": "vllm", "working_directory": "/var/lib/v", "python": "/opt/v/bin/python",
    ...      "environment_files": [["/etc/a.env", True]], "node_rank": 0, "nnodes": 2, "master_addr": "10.0.0.1",
    ...      "master_port": 29501}
    >>> collective_argv(u, "/usr/local/lib/dgxspark/c.py", "cuinit", "dgxspark-doctor-cuinit", 60)[-3:]
    ['/opt/v/bin/python', '/usr/local/lib/dgxspark/c.py', 'cuinit']
    >>> "--master-addr" in collective_argv(u, "/c.py", "allreduce", "d", 60)
    True
    """
    if not isinstance(unit, Mapping) or not unit.get("python"):
        return []
    argv = ["systemd-run", "--unit=%s" % unit_name, "--collect", "--quiet", "--wait", "--pipe",
            "-p", "RuntimeMaxSec=%d" % (int(timeout) + 30)]
    for key, prop in (("user", "User"), ("group", "Group"), ("working_directory", "WorkingDirectory")):
        if unit.get(key):
            argv += ["-p", "%s=%s" % (prop, unit[key])]
    for path, optional in unit.get("environment_files") or []:
        if path in (skip_files or ()):
            continue
        argv += ["-p", "EnvironmentFile=%s%s" % ("-" if optional else "", path)]
    argv += ["--", unit["python"], script, command]
    if command == "allreduce":
        if unit.get("node_rank") is None or not unit.get("nnodes") or not unit.get("master_addr") \
                or not unit.get("master_port"):
            return []
        argv += ["--rank", str(unit["node_rank"]), "--world-size", str(unit["nnodes"]),
                 "--master-addr", str(unit["master_addr"]), "--master-port", str(unit["master_port"]),
                 "--size-mb", str(size_mb), "--warmup", str(warmup), "--iters", str(iters), "--timeout", str(timeout)]
    return argv


def nccl_reason(nodes, level, hosts):
    """Why the all-reduce cannot run in this doctor run ("" when it can): the level, a serving unit that holds the
    GPU, a node without the resolved nccl.env or whose unit names no rank, or a run that leaves out ranks.
    ``nodes``: {host: doctor_facts result}, for the HOSTS of this run.

    >>> up = {"unit": {"ActiveState": "inactive"}, "nccl_env": {"NCCL_IB_HCA": "=rocep1s0f1"},
    ...       "unit_exec": {"python": "/v/bin/python", "node_rank": 0, "nnodes": 2, "master_addr": "10.0.0.1",
    ...                     "master_port": 29501}}
    >>> nccl_reason({"a": up, "b": dict(up, unit_exec=dict(up["unit_exec"], node_rank=1))}, "full", ["a", "b"])
    ''
    >>> nccl_reason({"a": dict(up, unit={"ActiveState": "active"}), "b": up}, "full", ["a", "b"])[:39]
    'the serving unit is active on a (active'
    """
    if level != "full":
        return "doctor_level quick (the all-reduce is measured at full level, with the serving units stopped)"
    nodes = nodes or {}
    missing = [h for h in hosts if not isinstance(nodes.get(h), Mapping) or _probe_error(nodes.get(h))]
    if missing:
        return "not read on %s" % ", ".join(missing)
    busy = ["%s (%s)" % (h, (nodes[h].get("unit") or {}).get("ActiveState") or "?") for h in hosts
            if (nodes[h].get("unit") or {}).get("ActiveState") not in ("inactive", "failed")]
    if busy:
        return ("the serving unit is active on %s: the all-reduce needs the GPU the ranks hold; stop the units "
                "(stop.yml), run doctor_level full, then site.yml starts them again" % ", ".join(busy))
    no_env = [h for h in hosts if not nodes[h].get("nccl_env")]
    if no_env:
        return ("no resolved NCCL environment on %s (the unit has not started since the boot: its ExecStartPre writes "
                "it); start the units once (site.yml), stop them, then run doctor" % ", ".join(no_env))
    units = dict((h, nodes[h].get("unit_exec") or {}) for h in hosts)
    bad = [h for h in hosts if not units[h].get("python") or units[h].get("node_rank") is None
           or not units[h].get("nnodes") or not units[h].get("master_addr") or not units[h].get("master_port")]
    if bad:
        return ("the serving unit on %s is not the venv kind's or names no --node-rank, --nnodes, --master-addr "
                "and --master-port (the container kind's all-reduce is not measured by doctor)" % ", ".join(bad))
    ranks = sorted(units[h]["node_rank"] for h in hosts)
    nnodes = set(units[h]["nnodes"] for h in hosts)
    if nnodes != set([len(hosts)]) or ranks != list(range(len(hosts))):
        return ("the run has ranks %s of --nnodes %s: every node of the serving group must be in it (no --limit)"
                % (ranks, "/".join(str(n) for n in sorted(nnodes))))
    return ""
