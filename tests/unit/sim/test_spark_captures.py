"""The stand-ins against real captures taken on a DGX Spark (tests/fixtures/captures), beyond show_gids and
ibdev2netdev, and what no public capture covers yet.

* ibstat: a real Spark's ibstat (ibstat/07-...: a Dell Pro Max with GB10, the f0 QSFP port cabled). Twice: the
  capture's own hardware through the stand-in, byte for byte (what ibstat adds: order, layout, formats); and the
  sim's own model of a Spark (rdma.default_hcas, the f0 pair as the rails) against the same capture with only the
  machine's GUIDs replaced (what the sim claims a Spark looks like: CA type, firmware, rate, the down twin's
  "Disabled"/40, capability mask, device order).
* nvidia-smi --query-gpu CSV: a real GB10 answer (nvidia-smi-query-gpu/01-...) to
  ``--query-gpu=index,name,memory.total,memory.free --format=csv``, byte for byte from the sim's default GB10.
* No public capture was found (searched: GitHub issues and pull requests, NVIDIA's dgx-spark-playbooks, forum and
  blog posts on GB10 / DGX Spark) for: ``ethtool enp1s0f1np1`` on a Spark; a ``--query-gpu`` CSV with clock fields
  (``clocks.sm``, ``clocks.max.sm``: what roles/clock_cap reads); the GB10 clock model itself (the maximum SM clock,
  the lock behaviour of ``-lgc``/``-rgc``). Those stand-ins are checked against their own code and ethtool's /
  nvidia-smi's documented formats only (tests/unit/sim/test_ethtool.py, test_nvidia_smi.py); the test below
  keeps that gap visible: it fails when such a capture is added without a golden test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from captures import capture_body, rdma, run_tool, write_tree
from test_ibstat import hardware_of

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "captures"
SPARK_IBSTAT = FIXTURES / "ibstat" / "07-dgx-spark-gb10-f0-cabled-p2f1-disabled.txt"
GB10_CSV = FIXTURES / "nvidia-smi-query-gpu" / "01-gb10-index-name-memory-na.txt"
NVIDIA_SMI = REPO / "sim" / "node" / "usr" / "bin" / "nvidia-smi"
GUID_RE = re.compile(r"(Node GUID|System image GUID|Port GUID): 0x[0-9a-f]{16}")


def _ibstat(root: Path) -> str:
    result = run_tool("ibstat", sysfs=root)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def _first_blocks(text: str, count: int) -> str:
    blocks = re.split(r"(?m)^(?=CA ')", text)
    return "".join([b for b in blocks if b][:count])


def test_a_real_spark_ibstat_is_reproduced_byte_for_byte(tmp_path: Path) -> None:
    body = capture_body(SPARK_IBSTAT)
    assert _ibstat(write_tree(tmp_path, hardware_of(body))) == body


def test_the_sims_spark_looks_like_a_real_spark_in_ibstat(tmp_path: Path) -> None:
    """The sim's Spark with the f0 pair cabled (rails on enp1s0f0np0 and its twin): the real capture, GUIDs aside."""
    body = capture_body(SPARK_IBSTAT)
    hcas = rdma.default_hcas("spark-head", [{"netdev": "enp1s0f0np0", "ipv4": "10.0.0.1"},
                                            {"netdev": "enP2p1s0f0np0", "ipv4": "10.0.1.1"}])
    ours = _first_blocks(_ibstat(write_tree(tmp_path, hcas)), body.count("CA '"))
    assert GUID_RE.sub(r"\1: GUID", ours) == GUID_RE.sub(r"\1: GUID", body)


def test_a_real_gb10_query_gpu_csv_is_reproduced_byte_for_byte(tmp_path: Path) -> None:
    header = [line for line in GB10_CSV.read_text().splitlines() if line.startswith("# expect:")][0]
    command = re.search(r"`(nvidia-smi [^`]+)`", header).group(1).split()
    sys.path.insert(0, str(REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"))
    from sparksim import gpu as gpumod  # pylint: disable=import-outside-toplevel
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "hostname": "spark-test", "gpu": gpumod.default_gpu("spark-test")}))
    env = dict(os.environ, SPARK_SIM_STATE=str(state), SPARK_SIM_EUID="1000")
    proc = subprocess.run([sys.executable, str(NVIDIA_SMI), *command[1:]], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == capture_body(GB10_CSV)


def test_the_tools_without_a_real_spark_capture_are_named():
    """ethtool and the clock fields have no real capture (see the module docstring); the README says so too."""
    assert not (FIXTURES / "ethtool").exists(), "an ethtool capture was added: give it a golden test here"
    csv_bodies = [capture_body(p) for p in sorted((FIXTURES / "nvidia-smi-query-gpu").glob("*.txt"))]
    assert not [b for b in csv_bodies if "clocks." in b], "a clocks capture was added: give it a golden test here"
    readme = (REPO / "README.md").read_text()
    assert "no public capture of `ethtool`" in readme
