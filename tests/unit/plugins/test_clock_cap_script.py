# -*- coding: utf-8 -*-
"""roles/clock_cap/files/dgxspark-clock-cap run as a subprocess against the sim's nvidia-smi stand-in
(state in tmp_path; its -lgc faults as `spark-sim fault` sets them) and a systemctl stand-in on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "clock_cap" / "files" / "dgxspark-clock-cap"
NODE_LIB = REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"
sys.path.insert(0, str(NODE_LIB))

from sparksim import gpu as gpumod  # noqa: E402

from ansible_collections.dgxspark.cluster.plugins.module_utils import textfile_metrics as tm  # noqa: E402


@pytest.fixture
def node(tmp_path):
    """A GB10 state, an nvidia-smi wrapper that counts its calls, a systemctl that answers $UNIT_STATE."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho \"$*\" >> %s/calls\nexec %s %s \"$@\"\n"
                   % (tmp_path, sys.executable, REPO / "sim" / "node" / "usr" / "bin" / "nvidia-smi"))
    smi.chmod(0o755)
    systemctl = bindir / "systemctl"
    systemctl.write_text("#!/bin/sh\n[ \"$1\" = is-active ] || exit 3\necho \"$UNIT_STATE\"\n[ \"$UNIT_STATE\" = active ]\n")
    systemctl.chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "hostname": "t", "gpu": gpumod.default_gpu("t"), "faults": {}}))

    class Node:
        path = tmp_path
        status = tmp_path / "run" / "clock-cap.status"

        def faults(self, **faults):
            data = json.loads(state.read_text())
            data["faults"] = faults
            state.write_text(json.dumps(data))

        def lock(self):
            return json.loads(state.read_text())["gpu"]["locked_clocks"]

        def calls(self):
            text = (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""
            return [line for line in text.splitlines() if line.startswith("-lgc")]

        def run(self, *args, unit_state="active"):
            env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), SPARK_SIM_STATE=str(state),
                       SPARK_SIM_EUID="0", DGXSPARK_CLOCK_CAP_STATUS=str(self.status), UNIT_STATE=unit_state)
            return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    return Node()


def test_apply_locks_reads_back_and_records_capped(node):
    proc = node.run("apply", "nvidia-smi", "0", "2100", "3", "0")
    assert proc.returncode == 0, proc.stderr
    assert 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2100)"' in proc.stdout
    assert "SM clock 2080 MHz, capped at 2100 MHz (attempt 1 of 3)" in proc.stdout
    assert node.lock() == {"min_mhz": 0, "max_mhz": 2100}
    assert node.status.read_text().startswith("capped: SM clock 2080 MHz, at most 2100 MHz")
    assert oct(node.status.stat().st_mode & 0o777) == "0o644"
    assert node.calls() == ["-lgc 0,2100"]


def test_a_failing_lgc_is_retried_a_bounded_number_of_times(node):
    node.faults(lgc_fails=True)
    proc = node.run("apply", "nvidia-smi", "0", "2100", "3", "0")
    assert proc.returncode == 1
    assert node.calls() == ["-lgc 0,2100"] * 3
    assert proc.stderr.count("failed: `nvidia-smi -lgc 0,2100` exited 255") == 3
    assert "attempt 3 of 3 failed" in proc.stderr and "the GPU is NOT capped" in proc.stderr
    status = node.status.read_text()
    assert status.startswith("failed: `nvidia-smi -lgc 0,2100` exited 255: \"Unable to set locked GPU clocks")
    assert status.rstrip().endswith("(after 3 attempts)")


def test_an_lgc_that_exits_0_without_a_lock_is_a_failure(node):
    node.faults(lgc_unsupported=True)
    proc = node.run("apply", "nvidia-smi", "0", "2100", "2", "0")
    assert proc.returncode == 1
    assert "exited 0 without setting the clocks" in node.status.read_text()
    assert node.calls() == ["-lgc 0,2100"] * 2


def test_a_lock_that_does_not_hold_the_ceiling_is_a_failure(node):
    # -lgc 2600,3003 sets clocks, but the clock then reads 2600 MHz: not under a ceiling of 2500
    proc = node.run("apply", "nvidia-smi", "2600", "2500", "1", "0")
    assert proc.returncode == 1
    assert "Invalid Argument" in proc.stdout  # min above max: nvidia-smi refuses
    node.run("apply", "nvidia-smi", "2600", "3003", "1", "0")
    assert node.status.read_text().startswith("capped: SM clock 2600 MHz")


def test_a_later_attempt_succeeds(node, tmp_path):
    # the first -lgc fails (as while the driver is still coming up at boot), the second works
    smi = tmp_path / "bin" / "nvidia-smi"
    (tmp_path / "fail-once").touch()
    smi.write_text(smi.read_text().replace("exec ", "[ -e %s/fail-once ] && [ \"$1\" = -lgc ] && { rm %s/fail-once; "
                                           "echo 'Unable to set locked GPU clocks for GPU 0000000F:01:00.0: Unknown Error'; "
                                           "exit 255; }\nexec " % (tmp_path, tmp_path), 1))
    proc = node.run("apply", "nvidia-smi", "0", "2100", "3", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "attempt 1 of 3 failed" in proc.stderr
    assert "capped at 2100 MHz (attempt 2 of 3)" in proc.stdout
    assert node.lock() == {"min_mhz": 0, "max_mhz": 2100}


def test_release_resets_the_lock(node):
    node.run("apply", "nvidia-smi", "0", "2100", "1", "0")
    proc = node.run("release", "nvidia-smi")
    assert proc.returncode == 0 and node.lock() is None
    assert node.status.read_text().startswith("released: `nvidia-smi -rgc` exited 0")


def test_require_passes_only_while_the_cap_unit_is_active_and_capped(node):
    unit = "dgxspark-clock-cap.service"
    missing = node.run("require", unit, unit_state="inactive")
    assert missing.returncode == 1 and "no result of the cap in this boot" in missing.stderr
    node.faults(lgc_fails=True)
    node.run("apply", "nvidia-smi", "0", "2100", "1", "0")
    refused = node.run("require", unit, unit_state="failed")
    assert refused.returncode == 1
    assert "not starting: %s is failed (failed: `nvidia-smi -lgc 0,2100` exited 255" % unit in refused.stderr
    assert "Unknown Error" in refused.stderr and "service_allow_uncapped=true" in refused.stderr
    node.faults()
    node.run("apply", "nvidia-smi", "0", "2100", "1", "0")
    assert node.run("require", unit, unit_state="active").returncode == 0
    node.run("release", "nvidia-smi")  # active but released (a stop in progress): not capped
    assert node.run("require", unit, unit_state="active").returncode == 1


def test_usage_errors_exit_2(node):
    assert node.run().returncode == 2
    assert node.run("apply", "nvidia-smi").returncode == 2
    assert node.run("require").returncode == 2


def test_apply_and_release_write_the_clock_cap_metrics(node, tmp_path):
    """dgxspark_clock_cap_* through the collection's textfile_metrics.py (the metrics role's), atomically, 0644."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    lib = REPO / "plugins" / "module_utils" / "textfile_metrics.py"

    def run(*args):
        env = dict(DGXSPARK_METRICS_LIB=str(lib), DGXSPARK_METRICS_DIR=str(metrics))
        with mock.patch.dict(os.environ, env):
            return node.run(*args)

    assert run("apply", "nvidia-smi", "0", "2100", "3", "0").returncode == 0
    text = (metrics / "clock_cap.prom").read_text()
    assert tm.read(text) == [("dgxspark_clock_cap_applied", {}, 1.0), ("dgxspark_clock_cap_max_mhz", {}, 2100.0),
                             ("dgxspark_sm_clock_mhz", {}, 2080.0)]
    assert "# TYPE dgxspark_sm_clock_mhz gauge" in text
    assert oct((metrics / "clock_cap.prom").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in metrics.iterdir()) == ["clock_cap.prom"]        # no temporary file left
    node.faults(lgc_fails=True)
    assert run("apply", "nvidia-smi", "0", "2100", "1", "0").returncode == 1
    failed = tm.read((metrics / "clock_cap.prom").read_text())
    assert failed[:2] == [("dgxspark_clock_cap_applied", {}, 0.0), ("dgxspark_clock_cap_max_mhz", {}, 2100.0)]
    run("release", "nvidia-smi")
    assert tm.read((metrics / "clock_cap.prom").read_text()) == [("dgxspark_clock_cap_applied", {}, 0.0)]


def test_no_metrics_without_the_metrics_role(node, tmp_path):
    with mock.patch.dict(os.environ, dict(DGXSPARK_METRICS_LIB=str(tmp_path / "absent.py"))):
        proc = node.run("apply", "nvidia-smi", "0", "2100", "3", "0")
    assert proc.returncode == 0 and "metrics" not in proc.stderr
