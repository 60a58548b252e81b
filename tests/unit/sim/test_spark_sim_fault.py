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
    assert proc.returncode == 1
    assert ("unknown fault 'melted-gpu'; expected one of: kv-block-corruption, low-acceptance, slow-decode, "
            "soft-logits-alone, clear") in proc.stderr


def edit(state: Path, name: str) -> dict:
    cli = load_cli()
    env = dict(os.environ, SPARK_SIM_STATE=str(state), PYTHONPATH=str(REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"))
    proc = subprocess.run([sys.executable, "-c", cli.FAULT_EDIT, name, json.dumps(list(cli.VLLM_FAULTS))], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return json.loads(proc.stdout)


def test_faults_accumulate_clear_and_reach_the_engine(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"gpu": {"driver_version": "580.173.02"}}))
    assert set(load_cli().VLLM_FAULTS) == set(behaviour.FAULTS)
    edit(state, "kv-block-corruption")
    assert edit(state, "slow-decode") == {"vllm_standin": {"faults": ["kv-block-corruption", "slow-decode"]}}
    cond = behaviour.Conditions({"VLLM_STANDIN_DECODE_TOK_S": "100"}, str(state))
    assert cond.faults() == ["kv-block-corruption", "slow-decode"] and cond.decode_rate() == 25.0
    assert edit(state, "clear") == {"vllm_standin": {"faults": []}}
    assert json.loads(state.read_text())["gpu"] == {"driver_version": "580.173.02"}
    assert cond.faults() == [] and cond.decode_rate() == 100.0
