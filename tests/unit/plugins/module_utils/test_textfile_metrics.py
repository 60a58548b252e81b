# -*- coding: utf-8 -*-
"""The dgxspark_* textfile writer (plugins/module_utils/textfile_metrics.py), the modules textfile_metrics and
exporter_web_config, and the node metrics script (roles/metrics/files/dgxspark_node_metrics.py)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.module_utils import textfile_metrics as tm
from ansible_collections.dgxspark.cluster.plugins.modules import exporter_web_config, textfile_metrics
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json

REPO = Path(__file__).resolve().parents[4]
NODE_SCRIPT = REPO / "roles" / "metrics" / "files" / "dgxspark_node_metrics.py"


def test_render_has_help_and_type_once_in_catalogue_order_and_escapes_labels():
    text = tm.render([("dgxspark_nccl_gid_index", {"rail": "1", "ipv4": 'a"b\\c'}, 3),
                      ("dgxspark_nccl_gid_index", {"rail": "0", "ipv4": "x"}, 3.0),
                      ("dgxspark_clock_cap_applied", {}, True)])
    lines = text.splitlines()
    assert lines[0] == "# HELP dgxspark_clock_cap_applied " + tm.CATALOGUE["dgxspark_clock_cap_applied"][1]
    assert lines[1:3] == ["# TYPE dgxspark_clock_cap_applied gauge", "dgxspark_clock_cap_applied 1"]
    assert text.count("# TYPE dgxspark_nccl_gid_index gauge") == 1
    assert 'dgxspark_nccl_gid_index{ipv4="a\\"b\\\\c",rail="1"} 3' in lines
    assert tm.read(text) == [("dgxspark_clock_cap_applied", {}, 1.0),
                             ("dgxspark_nccl_gid_index", {"ipv4": 'a"b\\c', "rail": "1"}, 3.0),
                             ("dgxspark_nccl_gid_index", {"ipv4": "x", "rail": "0"}, 3.0)]
    assert tm.render([("dgxspark_memavailable_bytes", {}, 1.5)]).endswith("dgxspark_memavailable_bytes 1.5\n")


@pytest.mark.parametrize("samples, fragment", [
    ([("node_load1", {}, 1)], "node_load1 is not in the dgxspark metrics catalogue"),
    ([("dgxspark_fabric_gbps", {"bad-label": "x"}, 1)], "bad label name 'bad-label'"),
])
def test_only_catalogued_names_and_good_labels(samples, fragment):
    with pytest.raises(tm.MetricsError, match=re.escape(fragment)):
        tm.render(samples)


def test_every_catalogued_metric_is_prefixed_typed_and_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for name, (kind, help_text, writer) in tm.CATALOGUE.items():
        assert name.startswith("dgxspark_") and kind in ("gauge", "counter") and help_text and writer
        assert name.endswith("_total") == (kind == "counter")
        assert "| `%s` |" % name in readme, name


def test_write_is_atomic_0644_and_off_without_the_directory(tmp_path):
    assert tm.write("node", [("dgxspark_memavailable_bytes", {}, 1)], str(tmp_path / "absent")) is False
    assert not (tmp_path / "absent").exists()
    assert tm.write("node", [("dgxspark_memavailable_bytes", {}, 1)], str(tmp_path)) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.prom"]
    assert stat.S_IMODE((tmp_path / "node.prom").stat().st_mode) == 0o644
    with pytest.raises(tm.MetricsError):
        tm.write("../x", [], str(tmp_path))


def test_the_command_line_the_clock_cap_script_uses(tmp_path):
    with mock.patch.object(tm, "DEFAULT_DIR", str(tmp_path)):
        assert tm.main(["clock_cap", "dgxspark_clock_cap_applied=1", "dgxspark_sm_clock_mhz=2080"]) == 0
        assert tm.main(["clock_cap", "oops"]) == 2
        assert tm.main(["clock_cap"]) == 2
    assert tm.read((tmp_path / "clock_cap.prom").read_text()) == [("dgxspark_clock_cap_applied", {}, 1.0),
                                                                  ("dgxspark_sm_clock_mhz", {}, 2080.0)]


def run_module(module, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        with pytest.raises((ExitJson, FailJson)) as result:
            module.main()
    return result.value.args[0]


def test_the_module_writes_once_and_not_in_check_mode(tmp_path):
    args = dict(name="checkpoint", directory=str(tmp_path),
                samples=[{"metric": "dgxspark_checkpoint_verified_info", "labels": {"repo": "o/m", "revision": "abc"}, "value": 1}])
    assert run_module(textfile_metrics, args, check_mode=True)["changed"] is True
    assert not (tmp_path / "checkpoint.prom").exists()
    assert run_module(textfile_metrics, args)["changed"] is True
    assert run_module(textfile_metrics, args)["changed"] is False
    assert tm.read((tmp_path / "checkpoint.prom").read_text()) == [
        ("dgxspark_checkpoint_verified_info", {"repo": "o/m", "revision": "abc"}, 1.0)]
    off = run_module(textfile_metrics, dict(args, directory=str(tmp_path / "absent")))
    assert off["changed"] is False and off["written"] is False
    bad = run_module(textfile_metrics, dict(args, samples=[{"metric": "up", "value": 1}]))
    assert bad["failed"] and "up is not in the dgxspark metrics catalogue" in bad["msg"]


def test_the_web_config_holds_a_bcrypt_hash_that_verifies_and_is_kept(tmp_path):
    path = tmp_path / "web.yml"
    user = os.environ.get("USER") or "root"
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True, check=True).stdout.strip()
    args = dict(path=str(path), user="prometheus", password="a-long-sim-password-1", owner=user, group=group, mode="0640")
    assert run_module(exporter_web_config, args, check_mode=True)["changed"] is True and not path.exists()
    assert run_module(exporter_web_config, args)["changed"] is True
    text = path.read_text()
    digest = re.search(r'^  prometheus: "(\$2b\$10\$[./A-Za-z0-9]{53})"$', text, re.M).group(1)
    assert "a-long-sim-password-1" not in text and stat.S_IMODE(path.stat().st_mode) == 0o640
    lib = exporter_web_config._libcrypt()        # pylint: disable=protected-access
    assert exporter_web_config.bcrypt_hash(lib, "a-long-sim-password-1", digest) == digest
    assert exporter_web_config.bcrypt_hash(lib, "another-password", digest) != digest
    assert run_module(exporter_web_config, args)["changed"] is False            # the same password: no new salt
    assert run_module(exporter_web_config, dict(args, password="another-password"))["changed"] is True
    assert digest not in path.read_text()
    bad = run_module(exporter_web_config, dict(args, user="a:b"))
    assert bad["failed"] and "no colon" in bad["msg"]


def test_the_node_metrics_script(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text("#!/bin/sh\necho activating\n")
    (bindir / "systemctl").chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]), DGXSPARK_METRICS_DIR=str(tmp_path),
               PYTHONPATH=str(REPO / "plugins" / "module_utils"))
    proc = subprocess.run([sys.executable, str(NODE_SCRIPT), "--unit", "dgxspark-vllm.service"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    page = tm.read((tmp_path / "node.prom").read_text())
    states = {labels["state"]: value for name, labels, value in page if name == "dgxspark_serving_state"}
    assert states == {"active": 0.0, "activating": 1.0, "deactivating": 0.0, "inactive": 0.0, "failed": 0.0}
    assert [value for name, _labels, value in page if name == "dgxspark_memavailable_bytes"][0] > 0


def test_the_watchdog_writes_its_counters(tmp_path, monkeypatch):
    """roles/service/files/dgxspark_vllm_watchdog.py after a tick: its state's counts as dgxspark_watchdog_*."""
    monkeypatch.syspath_prepend(str(REPO / "plugins" / "module_utils"))
    monkeypatch.syspath_prepend(str(REPO / "roles" / "service" / "files"))
    import textfile_metrics as shipped  # pylint: disable=import-outside-toplevel
    import dgxspark_vllm_watchdog as watchdog  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(shipped, "DEFAULT_DIR", str(tmp_path))
    watchdog.write_metrics({"counts": {"wedges": 2, "restarts": 1, "not_restarted": 1}}, now=1700000000.5)
    assert tm.read((tmp_path / "watchdog.prom").read_text()) == [
        ("dgxspark_watchdog_stalls_total", {}, 2.0), ("dgxspark_watchdog_restarts_total", {}, 1.0),
        ("dgxspark_watchdog_not_restarted_total", {}, 1.0), ("dgxspark_watchdog_last_tick_timestamp_seconds", {}, 1700000000.5)]
    watchdog.write_metrics({}, now=1.0)
    assert ("dgxspark_watchdog_restarts_total", {}, 0.0) in tm.read((tmp_path / "watchdog.prom").read_text())
