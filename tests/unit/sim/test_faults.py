"""Named faults: sim/spark-sim's FAULTS table and `fault` command, and what the nvidia-smi
stand-in does under each -lgc fault (the clock cap script's tests drive it too).

The -lgc texts and exit codes: sparksim/gpu.py, next to LGC_FAULTS, says where each comes from.
"""

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
NODE_LIB = REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"
TOOL = REPO / "sim" / "node" / "usr" / "bin" / "nvidia-smi"
sys.path.insert(0, str(NODE_LIB))

from sparksim import gpu as gpumod  # noqa: E402


def _cli():
    loader = importlib.machinery.SourceFileLoader("spark_sim_cli", str(REPO / "sim" / "spark-sim"))
    spec = importlib.util.spec_from_loader("spark_sim_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


CLI = _cli()


def make_state(path: Path, faults: dict | None = None) -> None:
    state = {"version": 1, "hostname": "spark-test", "gpu": gpumod.default_gpu("spark-test")}
    if faults is not None:
        state["faults"] = faults
    path.write_text(json.dumps(state), encoding="utf-8")


def smi(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARK_SIM_STATE=str(state), SPARK_SIM_EUID="0", SPARK_SIM_NOW="2025-10-03T23:16:52")
    return subprocess.run([sys.executable, str(TOOL), *args], env=env, capture_output=True, text=True, check=False)


def test_lgc_fails_is_an_nvml_error_and_nothing_else_breaks(tmp_path):
    state = tmp_path / "state.json"
    make_state(state, {"lgc_fails": True})
    result = smi(state, "-lgc", "0,2100")
    expected = "Unable to set locked GPU clocks for GPU 0000000F:01:00.0: Unknown Error\nTerminating early due to previous errors.\n"
    assert (result.returncode, result.stdout) == (255, expected)
    assert json.loads(state.read_text())["gpu"]["locked_clocks"] is None
    query = smi(state, "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits")
    assert (query.returncode, query.stdout) == (0, "2405, 3003\n")
    assert smi(state, "-rgc").returncode == 0
    assert smi(state, "-lgc", "0,9999").returncode == 2  # argument checks come first, as before


def test_lgc_unsupported_exits_0_without_a_lock(tmp_path):
    state = tmp_path / "state.json"
    make_state(state, {"lgc_unsupported": True})
    result = smi(state, "-lgc", "0,2100")
    expected = "Setting locked GPU clocks is not supported for GPU 0000000F:01:00.0.\nTreating as warning and moving on.\nAll done.\n"
    assert (result.returncode, result.stdout) == (0, expected)
    assert json.loads(state.read_text())["gpu"]["locked_clocks"] is None


def test_no_faults_key_is_no_fault(tmp_path):
    state = tmp_path / "state.json"
    make_state(state)  # a state file written before faults existed
    assert smi(state, "-lgc", "0,2100").returncode == 0
    make_state(state, {"lgc_fails": False})
    assert smi(state, "-lgc", "0,2100").returncode == 0


def test_every_fault_has_a_help_line_and_clear_turns_every_one_off():
    assert "lgc-fails" in CLI.FAULTS and "clear" not in CLI.FAULTS
    for name, fault in CLI.FAULTS.items():
        assert fault.what, name
        if fault.member:                       # a name in a list of the state (the vLLM stand-in's faults)
            assert not fault.on and not fault.off and fault.member[1] == name, name
        else:
            assert set(fault.on) == set(fault.off) and fault.on != fault.off, name


def _fault_edit(tmp_path, state, sets):
    env = dict(os.environ, SPARK_SIM_STATE=str(state), SPARK_SIM_SYSFS=str(tmp_path / "sys"), SPARK_SIM_PROC=str(tmp_path / "proc"),
               PYTHONPATH=str(NODE_LIB))
    return subprocess.run([sys.executable, "-c", CLI.FAULT_EDIT, *sets], env=env, capture_output=True, text=True, check=True)


@pytest.mark.parametrize("name", sorted(CLI.FAULTS))
def test_the_fault_edit_sets_and_clears_a_fault_in_the_state(tmp_path, name):
    state = tmp_path / "state.json"
    make_state(state)  # no "faults" key yet: the edit creates it
    fault = CLI.FAULTS[name]

    def at(tree, path):
        for key in path.split("."):
            tree = tree[key]
        return tree

    _fault_edit(tmp_path, state, fault.edits(on=True))
    _fault_edit(tmp_path, state, fault.edits(on=True))   # setting it twice is the same as once
    written = json.loads(state.read_text())
    for path, value in fault.on.items():
        assert at(written, path) == value
    if fault.member:
        assert at(written, fault.member[0]) == [fault.member[1]]
    assert written["gpu"]["name"] == "NVIDIA GB10"  # the rest of the state is kept
    out = _fault_edit(tmp_path, state, [edit for other in CLI.FAULTS.values() for edit in other.edits(on=False)])
    shown = json.loads(out.stdout)

    def leaves(tree):
        if isinstance(tree, dict):
            return [leaf for value in tree.values() for leaf in leaves(value)]
        return [tree]

    assert not any(leaves(shown)), shown                 # every fault off, the vLLM list empty
    written = json.loads(state.read_text())
    for other in CLI.FAULTS.values():
        for path, value in other.off.items():
            assert at(written, path) == value


def test_fault_command_line():
    proc = subprocess.run([sys.executable, str(REPO / "sim" / "spark-sim"), "fault", "--help"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and "lgc-fails" in proc.stdout and "clear" in proc.stdout
    proc = subprocess.run([sys.executable, str(REPO / "sim" / "spark-sim"), "fault", "spark-worker", "no-such-fault"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "invalid choice: 'no-such-fault'" in proc.stderr
