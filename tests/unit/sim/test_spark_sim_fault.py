"""`spark-sim fault HOST NAME|clear`: the named faults land in the node's state file where the
vLLM stand-in's engine reads them; an unknown name is refused naming the known ones."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CLI = REPO / "sim" / "spark-sim"
sys.path.insert(0, str(REPO / "sim" / "vllm-standin" / "src"))

from vllm import engine as behaviour  # noqa: E402  (the stand-in, from sim/vllm-standin/src)

from test_spark_sim_cli import sim, write_inventory  # noqa: E402


def load_cli():
    loader = importlib.machinery.SourceFileLoader("spark_sim_cli", str(CLI))
    spec = importlib.util.spec_from_loader("spark_sim_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_unknown_fault_is_refused_naming_the_known_ones(tmp_path):
    proc = sim(write_inventory(tmp_path), "fault", "spark-head", "melted-gpu")
    assert proc.returncode == 2
    assert "invalid choice: 'melted-gpu'" in proc.stderr
    for name in ("kv-block-corruption", "low-acceptance", "slow-decode", "soft-logits-alone", "clear"):
        assert "'%s'" % name in proc.stderr, name


VLLM_FAULTS = ("kv-block-corruption", "soft-logits-alone", "low-acceptance", "slow-decode", "slow-prefill", "wedge")


def edit(tmp_path: Path, state: Path, name: str) -> list:
    """What `spark-sim fault HOST NAME` runs on the node (FAULT_EDIT); returns the vLLM stand-in's fault list."""
    cli = load_cli()
    sets = ([e for fault in cli.FAULTS.values() for e in fault.edits(on=False)] if name == "clear"
            else cli.FAULTS[name].edits(on=True))
    env = dict(os.environ, SPARK_SIM_STATE=str(state), SPARK_SIM_SYSFS=str(tmp_path / "sys"),
               SPARK_SIM_PROC=str(tmp_path / "proc"), PYTHONPATH=str(REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"))
    proc = subprocess.run([sys.executable, "-c", cli.FAULT_EDIT, *sets], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return json.loads(proc.stdout)["vllm_standin"]


def test_faults_accumulate_clear_and_reach_the_engine(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"gpu": {"driver_version": "580.173.02"}}))
    cli = load_cli()
    assert {name for name, fault in cli.FAULTS.items() if fault.member} == set(VLLM_FAULTS) == set(behaviour.FAULTS)
    edit(tmp_path, state, "kv-block-corruption")
    assert edit(tmp_path, state, "slow-decode") == ["kv-block-corruption", "slow-decode"]
    cond = behaviour.Conditions({"VLLM_STANDIN_DECODE_TOK_S": "100"}, str(state))
    assert cond.faults() == ["kv-block-corruption", "slow-decode"] and cond.decode_rate() == 25.0
    assert edit(tmp_path, state, "clear") == []
    # clear is the power cycle: nvidia-uvm loaded again (nvidia-uvm-missing off), the rest of the GPU as it was
    assert json.loads(state.read_text())["gpu"] == {"driver_version": "580.173.02", "uvm_loaded": True}
    assert cond.faults() == [] and cond.decode_rate() == 100.0
    assert edit(tmp_path, state, "slow-prefill") == ["slow-prefill"]
    assert cond.prefill_rate() == pytest.approx(468540 / 498.0)    # seed 000's needle: 468,540 tokens in 498 s
    assert edit(tmp_path, state, "wedge") == ["slow-prefill", "wedge"] and cond.faults() == ["slow-prefill", "wedge"]


def _boot_and_worker_state(**state):
    """sparksim.boot (from the node's tree) and a worker whose one rail is 192.168.100.2 on enp1s0f1np1."""
    lib = str(REPO / "sim" / "node" / "usr" / "lib" / "spark-sim")
    if lib not in sys.path:
        sys.path.insert(0, lib)
    from sparksim import boot, rdma  # pylint: disable=import-outside-toplevel
    state.update(hostname="spark-worker",
                 hcas=rdma.default_hcas("spark-worker", [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.2"}]))
    return boot, state


def test_no_network_after_reboot_downs_only_the_management_link(monkeypatch, tmp_path):
    """boot.management_down: after a reboot (not the first boot) the links without a fabric address go down."""
    boot, state = _boot_and_worker_state(boot={"count": 2}, faults={"no_network_after_reboot": True})
    links = [{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
             {"ifname": "eth0", "addr_info": [{"local": "172.30.0.11"}]},
             {"ifname": "enp1s0f1np1", "addr_info": [{"local": "192.168.100.2"}]}]
    calls = []
    monkeypatch.setattr(boot, "_ip_json", lambda *args: links)
    monkeypatch.setattr(boot, "DEFAULT_ROUTE_PATH", str(tmp_path / "default-route"))

    def run(argv, check, **kwargs):
        if argv[:3] == ["ip", "route", "show"]:
            return subprocess.CompletedProcess(argv, 0, "default via 172.30.0.1 dev eth0\n", "")
        calls.append(argv)
    monkeypatch.setattr(boot.subprocess, "run", run)
    lines = boot.management_down(state)
    assert calls == [["ip", "link", "set", "dev", "eth0", "down"]]
    assert "eth0 (172.30.0.11) did not come back" in lines[0]
    assert (tmp_path / "default-route").read_text() == "default via 172.30.0.1 dev eth0\n"
    state["boot"]["count"] = 1
    calls.clear()
    assert boot.management_down(state) == [] and calls == []
    state["boot"]["count"], state["faults"]["no_network_after_reboot"] = 3, False
    assert boot.management_down(state) == [] and calls == []


def test_the_management_link_takes_the_spark_lan_name_with_its_routes(monkeypatch):
    """boot.name_management_link: docker names links in the order it attaches networks (the management link was
    eth2 on every node, first boot included, in CI on 75a3129), so the boot renames the one link without a fabric address to
    enP7s7 (the Spark's RJ45 port) and puts back its routes other than the kernel's own."""
    boot, state = _boot_and_worker_state(boot={"count": 2}, faults={})
    links = [{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
             {"ifname": "enp1s0f1np1", "addr_info": [{"local": "192.168.100.2"}]},
             {"ifname": "eth2", "addr_info": [{"local": "10.77.2.12"}]}]
    calls = []
    monkeypatch.setattr(boot, "_ip_json", lambda *args: links)

    def run(argv, check, **kwargs):
        calls.append(argv)
        if argv[:3] == ["ip", "route", "show"]:
            return subprocess.CompletedProcess(argv, 0, "default via 10.77.2.254\n10.77.2.0/24 proto kernel scope link "
                                                        "src 10.77.2.12\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")
    monkeypatch.setattr(boot.subprocess, "run", run)
    assert boot.name_management_link(state) == ["renamed eth2 to enP7s7 (10.77.2.12, the management link)"]
    assert calls == [["ip", "route", "show", "dev", "eth2"],
                     ["ip", "link", "set", "dev", "eth2", "down"],
                     ["ip", "link", "set", "dev", "eth2", "name", "enP7s7"],
                     ["ip", "link", "set", "dev", "enP7s7", "up"],
                     ["ip", "route", "replace", "default", "via", "10.77.2.254", "dev", "enP7s7"]]
    calls.clear()
    links[2]["ifname"] = "enP7s7"                 # already named: nothing to do
    assert boot.name_management_link(state) == [] and calls == []
    links[2]["ifname"] = "eth2"
    links.append({"ifname": "eth3", "addr_info": [{"local": "172.16.0.2"}]})   # two candidates: none is guessed
    assert boot.name_management_link(state) == [] and calls == []
