# -*- coding: utf-8 -*-
"""plugins/module_utils/doctor.py: doctor.yml's verdicts, on synthetic readings of a healthy pair and one fault each.

The readings have the shapes the doctor role registers (fabric_link_facts, roce_gid_facts, doctor_facts,
leftover_processes, memory_report, free_space, the check script's output); each fault case changes one reading on
one node and asserts exactly that check FAILs (or WARNs) on exactly that node, with its remedy, the others PASS.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import doctor

HEAD, WORKER = "spark-head", "spark-worker"
CUINIT_OK = {"ok": True, "devices": 1, "name": "NVIDIA GB10", "torch": "2.9.0+cu130", "cuda": "13.0"}


ESRT = {"entry": "entry0", "fw_class": "5370a4c5-0000-4000-8000-00000000e5a7", "fw_type": 1, "fw_version": 65539,
        "lowest_supported_fw_version": 65536, "capsule_flags": 0x8010, "last_attempt_version": 65539,
        "last_attempt_status": 0}


def link(netdev, ipv4, mtu=9000, problems=None):
    return {"netdev": netdev, "ipv4": ipv4, "device": "roce" + netdev, "port": 1, "carrier": "Up", "state": "Active",
            "physical_state": "LinkUp", "rate": 200, "mtu": mtu, "pcie_link_speed": "32.0 GT/s PCIe",
            "pcie_link_width": "4", "speed_mbps": 200000, "firmware": "28.45.4028", "problems": problems or []}


def probe(host, gid, rank_words=""):
    octet = 1 if host == HEAD else 2
    return {
        "links": {"changed": False, "ansible_facts": {"fabric_links": [
            link("enp1s0f1np1", "192.168.100.%d" % octet), link("enP2p1s0f1np1", "192.168.105.%d" % octet)]}},
        "firmware": {"changed": False, "esrt": [dict(ESRT)], "failed_updates": []},
        "gids": {"changed": False, "gid_index": gid, "rails": [{"device": "rocep1s0f1"}, {"device": "roceP2p1s0f1"}]},
        "node": {
            "changed": False,
            "nvidia_smi": {"rc": 0, "output": "580.173.02, Enabled, 2080, 3003\n",
                           "fields": {"driver_version": "580.173.02", "persistence_mode": "Enabled",
                                      "clocks.sm": "2080", "clocks.max.sm": "3003"}},
            "loaded_driver": "580.173.02", "installed_driver": "580.173.02", "kernel": "6.17.0-1014-nvidia",
            "module_builds": ["linux-modules-nvidia-580-open-6.17.0-1014-nvidia"],
            "held": ["nvidia-utils-580", "libnvidia-compute-580"], "unheld_driver_packages": [], "upgrade_moves": [],
            "earlyoom": {"LoadState": "masked", "ActiveState": "inactive", "UnitFileState": "masked"},
            "unit": {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success",
                     "NRestarts": "0"},
            "first_error": "",
            "clock_cap_status": "capped: SM clock 2080 MHz, at most 2100 MHz (nvidia-smi -lgc 0,2100, attempt 1 of 3)",
            "nccl_env": {"NCCL_IB_GID_INDEX": str(gid), "NCCL_IB_HCA": "=rocep1s0f1:1,roceP2p1s0f1:1"},
            "vllm_env": {"HF_HUB_OFFLINE": "1"}, "vllm_env_digest": "aaaa", "unit_argv_digest": "bbbb" + rank_words,
            "cuda": "13.0 (13.0.88)", "runtime_version": "vllm 0.27.1+spark.sim, torch 2.9.0",
            "checkpoint_record": {"repo_id": "org/model", "revision": "c" * 40, "fingerprint": "f" * 64},
            "incomplete_files": [], "repo_dir": "/cache/models--org--model",
        },
        "leftovers": {"changed": False, "leftovers": [], "summary": []},
        "memory": {"changed": False, "checked": False, "reason": "the unit runs", "msg": "MemAvailable 20000 MiB",
                   "available_mb": 20000, "ok": True},
        "disk": {"changed": False, "checked": "/var/lib", "free_bytes": 200 * 10 ** 9},
        "cache_paths": "checkpoint_cache_dir /cache, runtime_cache_dir /vcache",
        "cuinit": {"rc": 0, "stdout": json.dumps(CUINIT_OK)},
        "allreduce": None,
        "api": {"health": {"status": 200, "seconds": 0}, "models": {"rc": 0, "stdout": "serving: ...", "delta": "0:00:00.2"},
                "completion": {"rc": 0, "stdout": "serving: ... answered", "delta": "0:00:01.500000"}},
    }


CONTEXT = {"head": HEAD, "hosts": [HEAD, WORKER], "level": "quick", "mtu": 9000, "clock_cap_enabled": True,
           "clock_cap_max_mhz": 2100, "min_free_disk_gb": 50, "model": "org/model", "revision": "c" * 40,
           "unit_name": "dgxspark-vllm.service", "bandwidth_floor_gbps": 80}


def healthy():
    return {HEAD: probe(HEAD, 3), WORKER: probe(WORKER, 6)}


def statuses(rep):
    return {(r["host"], r["check"]): r["status"] for r in rep["results"]}


def not_pass(rep):
    return {k: v for k, v in statuses(rep).items() if v != doctor.PASS}


def by(rep, host, check):
    return [r for r in rep["results"] if r["host"] == host and r["check"] == check][0]


def test_the_healthy_pair_passes_every_check_at_the_quick_level():
    rep = doctor.report(healthy(), CONTEXT)
    assert not_pass(rep) == {}
    assert rep["failed"] == []
    assert rep["counts"] == {"PASS": len(rep["results"]), "WARN": 0, "FAIL": 0}
    # every node gets every check, the API checks only the head
    checks = doctor.checks_for(doctor.CLASSES, "quick")
    assert len(rep["results"]) == 2 * len(checks) - len(doctor.HEAD_ONLY)
    assert "fabric-bandwidth" not in checks and "nccl-allreduce" not in checks    # measurements: the full level
    assert by(rep, WORKER, "gpu-cuinit")["evidence"] == ("CUDA initialised through the runtime: 1 device(s), NVIDIA GB10 "
                                                         "(torch 2.9.0+cu130, CUDA 13.0)")
    assert by(rep, HEAD, "fabric-gid-index")["evidence"].startswith("nccl.env NCCL_IB_GID_INDEX=3 = the live")
    assert by(rep, WORKER, "parity-driver")["evidence"] == "580.173.02, as on spark-head"
    assert "in 1.5 s" in by(rep, HEAD, "serving-completion")["evidence"]
    for line in rep["lines"]:
        assert line.startswith(("PASS ", "WARN ", "FAIL ", "    remedy: "))


def _mtu(p):
    p[WORKER]["links"]["ansible_facts"]["fabric_links"][1]["mtu"] = 1500


def _carrier(p):
    p[WORKER]["links"]["ansible_facts"]["fabric_links"][0]["problems"] = ["enp1s0f1np1: ethtool Speed 100000Mb/s, expected >= 200000"]


def _gid(p):
    p[WORKER]["node"]["nccl_env"]["NCCL_IB_GID_INDEX"] = "3"


def _mismatch(p):
    node = p[HEAD]["node"]
    node["nvidia_smi"] = {"rc": 18, "output": "Failed to initialize NVML: Driver/library version mismatch\n"
                                              "NVML library version: 580.178\n", "fields": {}}
    node["installed_driver"] = "580.178.04"


def _lost_lock(p):
    p[WORKER]["node"]["nvidia_smi"]["fields"]["clocks.sm"] = "2405"


def _cap_failed(p):
    p[WORKER]["node"]["clock_cap_status"] = "failed: nvidia-smi -lgc exited 255 (after 3 attempts)"


def _persistence(p):
    p[WORKER]["node"]["nvidia_smi"]["fields"]["persistence_mode"] = "Disabled"


def _no_module(p):
    p[WORKER]["node"]["module_builds"] = []


def _moves(p):
    p[WORKER]["node"]["upgrade_moves"] = [{"action": "Inst", "package": "nvidia-utils-580", "version": "580.178.04-1"}]


def _earlyoom(p):
    p[HEAD]["node"]["earlyoom"] = {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}


def _leftover(p):
    p[WORKER]["leftovers"] = {"leftovers": [{"pid": 4}], "summary": ["pid 4 vllm (vllm serve) holds port 8888"]}


def _memory(p):
    p[WORKER]["memory"] = {"checked": True, "ok": False, "msg": "MemAvailable 90000 MiB below 119808 MiB"}


def _disk(p):
    p[WORKER]["disk"]["free_bytes"] = 10 * 10 ** 9


def _env_drift(p):
    p[WORKER]["node"]["vllm_env_digest"] = "cccc"
    p[WORKER]["node"]["vllm_env"] = {"HF_HUB_OFFLINE": "1", "VLLM_SLEEP_WHEN_IDLE": "1"}


def _record(p):
    p[WORKER]["node"]["checkpoint_record"] = None


def _offline(p):
    p[WORKER]["node"]["vllm_env"] = {"HF_HUB_OFFLINE": "0"}


def _incomplete(p):
    p[WORKER]["node"]["incomplete_files"] = ["/cache/models--org--model/blobs/abc.incomplete"]


def _start_limit(p):
    p[WORKER]["node"]["unit"].update(ActiveState="failed", SubState="failed", Result="start-limit-hit")
    p[WORKER]["node"]["first_error"] = "1733065000.2 w vllm[9]: ERROR NCCL unhandled system error"


def _hung(p):
    p[HEAD]["api"]["completion"] = {"rc": 3, "stdout": "engine hangs: /health answers 200 ...", "delta": "0:00:30.0"}


def _firmware(p):
    p[WORKER]["links"]["ansible_facts"]["fabric_links"][1]["firmware"] = "28.39.1002"


def _system_firmware(p):
    p[WORKER]["firmware"]["esrt"][0].update(fw_version=65538, last_attempt_version=65540, last_attempt_status=6)


def _probe_failed(p):
    p[WORKER]["gids"] = {"failed": True, "msg": "no RoCE v2 GID carries 192.168.100.2"}


def _uvm(p):
    p[WORKER]["cuinit"] = {"rc": 1, "stdout": json.dumps({"ok": False, "stage": "cuda", "torch": "2.9.0+cu130", "error": (
        "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
        "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.")})}


FAULTS = [
    ("nvidia-uvm-missing", _uvm, WORKER, "gpu-cuinit", "FAIL", "cuda: RuntimeError: CUDA unknown error - this may be"),
    ("mtu-1500-on-one-end", _mtu, WORKER, "fabric-mtu", "FAIL", "enP2p1s0f1np1 MTU 1500, expected 9000 (peer: spark-head 9000)"),
    ("slow-negotiated-speed", _carrier, WORKER, "fabric-links", "FAIL", "Speed 100000Mb/s"),
    ("stale-gid-index", _gid, WORKER, "fabric-gid-index", "FAIL", "NCCL_IB_GID_INDEX=3"),
    ("gid-probe-failed", _probe_failed, WORKER, "fabric-gid-index", "FAIL", "no RoCE v2 GID carries"),
    ("driver-library-mismatch", _mismatch, HEAD, "gpu-driver", "FAIL", "Driver/library version mismatch"),
    ("clock-lock-lost", _lost_lock, WORKER, "gpu-clock-cap", "FAIL", "SM clock 2405 MHz, cap 2100 MHz"),
    ("clock-cap-failed", _cap_failed, WORKER, "gpu-clock-cap", "FAIL", "status: failed: nvidia-smi -lgc exited 255"),
    ("persistence-off", _persistence, WORKER, "gpu-persistence", "WARN", "Disabled"),
    ("no-module-build", _no_module, WORKER, "platform-kernel", "FAIL", "no NVIDIA module build"),
    ("upgrade-moves-driver", _moves, WORKER, "platform-held", "FAIL", "nvidia-utils-580 580.178.04-1"),
    ("earlyoom-active", _earlyoom, HEAD, "platform-earlyoom", "FAIL", "ActiveState=active"),
    ("leftover-vllm", _leftover, WORKER, "platform-leftovers", "FAIL", "pid 4 vllm"),
    ("memory-short", _memory, WORKER, "platform-memory", "FAIL", "below 119808"),
    ("disk-short", _disk, WORKER, "platform-disk", "WARN", "10.0 GB free"),
    ("vllm-env-drift", _env_drift, WORKER, "parity-vllm-env", "FAIL", "spark-worker has cccc, spark-head has aaaa: VLLM_SLEEP_WHEN_IDLE (spark-worker 1, "
     "spark-head unset)"),
    ("firmware-differs", _firmware, WORKER, "parity-firmware", "WARN",
     "spark-worker has 28.39.1002 (roceenP2p1s0f1np1), 28.45.4028 (roceenp1s0f1np1), spark-head has 28.45.4028"),
    ("system-firmware-differs", _system_firmware, WORKER, "parity-system-firmware", "WARN",
     "spark-worker has system firmware 65538 (5370a4c5-0000-4000-8000-00000000e5a7); the last firmware update of system firmware "
     "(5370a4c5-0000-4000-8000-00000000e5a7) did not apply: AC power too low (ESRT last_attempt_status 6, version 65540 "
     "attempted, 65538 running), spark-head has system firmware 65539 (5370a4c5-0000-4000-8000-00000000e5a7)"),
    ("no-verify-record", _record, WORKER, "checkpoint-record", "FAIL", "no verify record"),
    ("online", _offline, WORKER, "checkpoint-offline", "WARN", "HF_HUB_OFFLINE=0"),
    ("unfinished-blob", _incomplete, WORKER, "checkpoint-unfinished", "FAIL", "abc.incomplete"),
    ("start-limit-hit", _start_limit, WORKER, "serving-unit", "FAIL", "start-limit-hit"),
    ("engine-hangs", _hung, HEAD, "serving-completion", "FAIL", "engine hangs"),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
def test_one_fault_fails_exactly_its_check_on_exactly_its_node_with_the_remedy(fault):
    _name, inject, host, check, status, evidence = fault
    probes = healthy()
    inject(probes)
    rep = doctor.report(probes, CONTEXT)
    expected = {(host, check): status}
    if check == "gpu-driver":  # nvidia-smi answers nothing else: the clock and persistence are not read, said so
        expected.update({(host, "gpu-clock-cap"): "WARN", (host, "gpu-persistence"): "WARN"})
        assert by(rep, host, "gpu-clock-cap")["evidence"].startswith("not read: nvidia-smi failed")
    if check == "checkpoint-record":  # no record: nothing to compare either, said so
        expected[(host, "parity-checkpoint")] = "WARN"
        assert by(rep, host, "parity-checkpoint")["evidence"].startswith("not compared: nothing read on spark-worker (not installed")
    assert not_pass(rep) == expected
    found = by(rep, host, check)
    assert evidence in found["evidence"], found
    assert found["remedy"] == doctor.CHECKS[check][1] and found["remedy"].endswith(".")
    assert rep["failed"] == (["%s %s" % (host, check)] if status == "FAIL" else [])


def test_the_first_error_and_both_values_are_named():
    probes = healthy()
    _start_limit(probes)
    assert "first error: 1733065000.2 w vllm[9]: ERROR NCCL unhandled system error" in \
        by(doctor.report(probes, CONTEXT), WORKER, "serving-unit")["evidence"]
    probes = healthy()
    probes[WORKER]["node"]["loaded_driver"] = "580.178.04"
    probes[WORKER]["node"]["installed_driver"] = "580.178.04"
    found = by(doctor.report(probes, CONTEXT), WORKER, "parity-driver")
    assert found["status"] == "FAIL" and found["evidence"] == "spark-worker has 580.178.04, spark-head has 580.173.02"


def test_an_unreachable_node_fails_every_check_and_the_subset_and_level_choose_the_checks():
    probes = healthy()
    del probes[WORKER]
    rep = doctor.report(probes, dict(CONTEXT, classes=["gpu"]))
    assert statuses(rep) == {(HEAD, "gpu-driver"): "PASS", (HEAD, "gpu-cuinit"): "PASS", (HEAD, "gpu-clock-cap"): "PASS",
                             (HEAD, "gpu-persistence"): "PASS", (WORKER, "gpu-driver"): "FAIL",
                             (WORKER, "gpu-cuinit"): "FAIL", (WORKER, "gpu-clock-cap"): "FAIL",
                             (WORKER, "gpu-persistence"): "FAIL"}
    assert by(rep, WORKER, "gpu-driver")["evidence"] == "not read (the node did not answer)"
    assert doctor.checks_for(["fabric"], "full") == ["fabric-links", "fabric-mtu", "fabric-gid-index", "fabric-bandwidth"]


def test_bandwidth_at_the_full_level_names_the_slow_direction_on_both_of_its_nodes():
    measured = [{"rail": 0, "netdev": "enp1s0f1np1", "client": WORKER, "server": HEAD, "gbps": 13.1},
                {"rail": 0, "netdev": "enp1s0f1np1", "client": HEAD, "server": WORKER, "gbps": 13.2}]
    rep = doctor.report(healthy(), dict(CONTEXT, level="full", classes=["fabric"], bandwidth=measured))
    assert by(rep, WORKER, "fabric-bandwidth")["status"] == "FAIL"
    assert "rail 0 (enp1s0f1np1) spark-worker -> spark-head 13.10 Gb/s" in by(rep, WORKER, "fabric-bandwidth")["evidence"]
    healthy_figures = [dict(m, gbps=96.5) for m in measured]
    rep = doctor.report(healthy(), dict(CONTEXT, level="full", classes=["fabric"], bandwidth=healthy_figures))
    assert not_pass(rep) == {}
    failed = [dict(measured[0], gbps=None, error="ib_write_bw exited 1")]
    rep = doctor.report(healthy(), dict(CONTEXT, level="full", classes=["fabric"], bandwidth=failed))
    assert "ib_write_bw exited 1" in by(rep, WORKER, "fabric-bandwidth")["evidence"]


def test_parsers():
    assert doctor.parse_env("# c\nexport A=1\nB='x y'\n\nnot a pair\n") == {"A": "1", "B": "x y"}
    assert doctor.parse_query_gpu(["a", "b"], "1, 2\n") == {"a": "1", "b": "2"}
    assert doctor.parse_query_gpu(["a", "b"], "Failed to initialize NVML: Driver/library version mismatch\n") == {}
    assert doctor.normalise_argv(["vllm", "serve", "--node-rank=1", "--headless", "--nnodes", "2"]) == \
        ["vllm", "serve", "--nnodes", "2"]
    assert doctor.seconds("bad") is None


def test_the_recipe_commit_is_compared_when_the_nodes_run_one():
    probes = healthy()
    rep = doctor.report(probes, CONTEXT)
    assert by(rep, WORKER, "parity-recipe")["status"] == doctor.PASS
    assert by(rep, WORKER, "parity-recipe")["evidence"].startswith("no recipe checkout on any node")
    probes[HEAD]["node"]["recipe_commit"] = "a" * 40
    probes[WORKER]["node"]["recipe_commit"] = "a" * 40
    rep = doctor.report(probes, CONTEXT)
    assert not_pass(rep) == {}
    assert by(rep, WORKER, "parity-recipe")["evidence"] == "%s, as on spark-head" % ("a" * 40)
    probes[WORKER]["node"]["recipe_commit"] = "b" * 40
    rep = doctor.report(probes, CONTEXT)
    found = by(rep, WORKER, "parity-recipe")
    assert found["status"] == doctor.FAIL
    assert found["evidence"] == "spark-worker has %s, spark-head has %s" % ("b" * 40, "a" * 40)
    assert "runtime_recipe_version" in found["remedy"]
    assert by(rep, HEAD, "parity-recipe")["status"] == doctor.PASS
    probes[WORKER]["node"]["recipe_commit"] = ""                # the worker has no checkout, the head has one
    assert by(doctor.report(probes, CONTEXT), WORKER, "parity-recipe")["status"] == doctor.WARN


ALLREDUCE_OK = {"ok": True, "rank": 0, "world_size": 2, "bytes": 1 << 30, "iters": 20, "time_us": 46300.0,
                "algbw_gbs": 23.19, "busbw_gbs": 23.19, "wrong": 0, "nccl": "2.27.7", "torch": "2.9.0+cu130"}


def allreduce(**change):
    return {"rc": 0 if change.get("ok", True) else 1, "stdout": json.dumps(dict(ALLREDUCE_OK, **change))}


def test_the_all_reduce_at_the_full_level_passes_above_the_floor_and_fails_below_it():
    full = dict(CONTEXT, level="full", classes=["nccl"], nccl_floor_gbs=15)
    probes = healthy()
    for host in (HEAD, WORKER):
        probes[host]["allreduce"] = allreduce(rank=0 if host == HEAD else 1)
    rep = doctor.report(probes, full)
    assert not_pass(rep) == {}
    assert by(rep, WORKER, "nccl-allreduce")["evidence"] == (
        "rank 1 of 2: 1024 MiB x 20, 46300.0 us per all-reduce, algbw 23.19 GB/s, busbw 23.19 GB/s "
        "(NCCL 2.27.7, torch 2.9.0+cu130) (floor 15 GB/s)")
    # the power-delivery fault: a collective's figure belongs to both ranks (a pair cannot tell which node)
    for host in (HEAD, WORKER):
        probes[host]["allreduce"] = allreduce(algbw_gbs=3.22, busbw_gbs=3.22, time_us=333000.0)
    rep = doctor.report(probes, full)
    assert not_pass(rep) == {(HEAD, "nccl-allreduce"): "FAIL", (WORKER, "nccl-allreduce"): "FAIL"}
    found = by(rep, HEAD, "nccl-allreduce")
    assert found["evidence"].endswith("busbw 3.22 GB/s (NCCL 2.27.7, torch 2.9.0+cu130), below the floor 15 GB/s "
                                      "(doctor_nccl_min_busbw_gbps)"), found
    assert found["remedy"].startswith("Reboot both nodes with the cables seated; still slow with the fabric healthy: "
                                      "power both nodes off with AC removed")
    probes[WORKER]["allreduce"] = allreduce(wrong=1)
    assert "the sum read back wrong" in by(doctor.report(probes, full), WORKER, "nccl-allreduce")["evidence"]


def test_an_all_reduce_that_failed_names_its_stage_and_error_and_one_not_run_says_why():
    full = dict(CONTEXT, level="full", classes=["nccl"], nccl_floor_gbs=15)
    probes = healthy()
    probes[HEAD]["allreduce"] = {"rc": 1, "stdout": json.dumps({"ok": False, "rank": 0, "world_size": 2, "stage": "init",
                                                                "error": "DistBackendError: NCCL error in: x"})}
    probes[WORKER]["allreduce"] = {"rc": 1, "stdout": "", "stderr": "Failed to start transient service unit: boom"}
    rep = doctor.report(probes, full)
    assert by(rep, HEAD, "nccl-allreduce")["evidence"] == "rank 0 of 2, init: DistBackendError: NCCL error in: x"
    assert by(rep, WORKER, "nccl-allreduce")["evidence"] == ("rank ? of ?, run: exit 1: Failed to start transient "
                                                             "service unit: boom")
    rep = doctor.report(healthy(), dict(full, nccl_reason="the serving unit is active on spark-head (active)"))
    assert not_pass(rep) == {(HEAD, "nccl-allreduce"): "WARN", (WORKER, "nccl-allreduce"): "WARN"}
    assert by(rep, WORKER, "nccl-allreduce")["evidence"] == "not measured: the serving unit is active on spark-head (active)"
    assert by(rep, WORKER, "nccl-allreduce")["remedy"] == doctor.NOT_MEASURED


def test_cuinit_not_run_on_the_container_kind_warns_with_the_reason():
    rep = doctor.report(healthy(), dict(CONTEXT, classes=["gpu"], cuinit_reason="runtime_kind container: x"))
    assert not_pass(rep) == {(HEAD, "gpu-cuinit"): "WARN", (WORKER, "gpu-cuinit"): "WARN"}
    probes = healthy()
    probes[HEAD]["cuinit"] = None
    probes[HEAD]["node"]["unit_exec"] = {"python": "/v/bin/python"}
    assert by(doctor.report(probes, dict(CONTEXT, classes=["gpu"])), HEAD, "gpu-cuinit")["evidence"] == "run: not run"
    # no unit to run as (the runtime not installed yet): said so, not ansible's skip reason
    probes[HEAD]["cuinit"] = {"skipped": True, "skip_reason": "Conditional result was False"}
    probes[HEAD]["node"]["unit_exec"] = {}
    found = by(doctor.report(probes, dict(CONTEXT, classes=["gpu"])), HEAD, "gpu-cuinit")
    assert found["status"] == "FAIL" and found["evidence"] == (
        "not run: no serving unit to run the runtime's Python as (its unit file names no ExecStart; site.yml installs "
        "the runtime and the unit)"), found


UNIT = """# roles/service ...
[Unit]
Description=vLLM x (worker, node rank 1 of 2, venv)

[Service]
Type=exec
User=dgxspark-vllm
Group=dgxspark-vllm
WorkingDirectory=/var/lib/dgxspark/vllm
ExecStartPre=+/usr/local/sbin/dgxspark-nccl-env
EnvironmentFile=-/etc/dgxspark/cuda.env
EnvironmentFile=/etc/dgxspark/vllm.env
EnvironmentFile=-/run/dgxspark/nccl.env
EnvironmentFile=/etc/dgxspark/vllm-secret.env
ExecStart=/opt/dgxspark/vllm/bin/vllm "serve" "deepseek-ai/DeepSeek-V4-Flash-0731" "--nnodes" "2" "--node-rank" "1" \
 "--master-addr" "192.168.110.1" "--master-port" "29501" "--headless"
"""


def test_the_units_own_user_environment_rank_and_master_run_the_entry_point():
    unit = doctor.unit_exec(UNIT)
    assert (unit["user"], unit["group"], unit["python"], unit["node_rank"], unit["nnodes"], unit["master_addr"],
            unit["master_port"]) == ("dgxspark-vllm", "dgxspark-vllm", "/opt/dgxspark/vllm/bin/python", 1, 2,
                                     "192.168.110.1", 29501)
    argv = doctor.collective_argv(unit, "/usr/local/lib/dgxspark/dgxspark_collective.py", "allreduce",
                                  "dgxspark-doctor-allreduce", 120, size_mb=1024, skip_files=["/etc/dgxspark/vllm-secret.env"])
    assert argv == [
        "systemd-run", "--unit=dgxspark-doctor-allreduce", "--collect", "--quiet", "--wait", "--pipe",
        "-p", "RuntimeMaxSec=150", "-p", "User=dgxspark-vllm", "-p", "Group=dgxspark-vllm",
        "-p", "WorkingDirectory=/var/lib/dgxspark/vllm", "-p", "EnvironmentFile=-/etc/dgxspark/cuda.env",
        "-p", "EnvironmentFile=/etc/dgxspark/vllm.env", "-p", "EnvironmentFile=-/run/dgxspark/nccl.env",
        "--", "/opt/dgxspark/vllm/bin/python", "/usr/local/lib/dgxspark/dgxspark_collective.py", "allreduce",
        "--rank", "1", "--world-size", "2", "--master-addr", "192.168.110.1", "--master-port", "29501",
        "--size-mb", "1024", "--warmup", "5", "--iters", "20", "--timeout", "120"]
    assert "vllm-secret.env" not in " ".join(argv)      # the API key's file: neither CUDA nor NCCL reads it
    assert doctor.unit_exec("[Service]\nType=oneshot\n") == {}
    assert doctor.collective_argv({}, "/c.py", "cuinit", "u", 60) == []
    assert doctor.collective_argv(dict(unit, master_addr=None), "/c.py", "allreduce", "u", 60) == []


def test_the_all_reduce_runs_only_with_every_unit_stopped_and_every_rank_in_the_run():
    def node(rank, state="inactive", env=True):
        unit = doctor.unit_exec(UNIT.replace('"--node-rank" "1"', '"--node-rank" "%d"' % rank))
        return {"unit": {"ActiveState": state}, "nccl_env": {"NCCL_IB_HCA": "=x"} if env else None, "unit_exec": unit}
    hosts = [HEAD, WORKER]
    assert doctor.nccl_reason({HEAD: node(0), WORKER: node(1)}, "full", hosts) == ""
    assert doctor.nccl_reason({HEAD: node(0), WORKER: node(1, "failed")}, "full", hosts) == ""
    assert doctor.nccl_reason({HEAD: node(0), WORKER: node(1)}, "quick", hosts).startswith("doctor_level quick")
    assert doctor.nccl_reason({HEAD: node(0, "active"), WORKER: node(1, "activating")}, "full", hosts).startswith(
        "the serving unit is active on spark-head (active), spark-worker (activating): the all-reduce needs the GPU")
    assert doctor.nccl_reason({HEAD: node(0), WORKER: node(1, env=False)}, "full", hosts).startswith(
        "no resolved NCCL environment on spark-worker")
    assert doctor.nccl_reason({HEAD: node(0)}, "full", [HEAD]) == (
        "the run has ranks [0] of --nnodes 2: every node of the serving group must be in it (no --limit)")
    assert doctor.nccl_reason({HEAD: node(0), WORKER: {"failed": True, "msg": "x"}}, "full", hosts) == \
        "not read on spark-worker"
    bad = node(1)
    bad["unit_exec"] = {}
    assert "is not the venv kind's" in doctor.nccl_reason({HEAD: node(0), WORKER: bad}, "full", hosts)
