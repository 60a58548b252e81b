# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/memory_report.py: the check before a start (skipped while the unit runs, 0
disables), the failure's figures, the page-cache residency of given files (mincore)."""

from __future__ import annotations

from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import memory_report
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json


def run(args, unit_state="inactive\n", rc=0):
    calls = []

    def run_command(self, argv, **kw):  # pylint: disable=unused-argument
        calls.append(argv)
        return rc, unit_state, "Failed to connect to bus" if rc else ""

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command):
        with pytest.raises((ExitJson, FailJson)) as result:
            memory_report.main()
    return result.value.args[0], calls


def test_a_stopped_unit_is_checked_and_an_impossible_minimum_fails_with_the_figures():
    result, calls = run({"minimum_mb": 100000000, "unit": "dgxspark-vllm.service"})
    assert calls == [["systemctl", "show", "--property=ActiveState", "--value", "dgxspark-vllm.service"]]
    assert result["checked"] is True and result["ok"] is False and result["unit_state"] == "inactive"
    assert result["msg"].startswith("MemAvailable ") and "expected at least 97656.2 GiB" in result["msg"]
    assert "page cache (Cached)" in result["msg"] and "largest processes: " in result["msg"]


def test_a_running_unit_is_not_checked():
    result, _calls = run({"minimum_mb": 100000000, "unit": "dgxspark-vllm.service"}, unit_state="active\n")
    assert result["checked"] is False and result["ok"] is True and result["unit_state"] == "active"
    assert "not checked: dgxspark-vllm.service is active" in result["msg"]


def test_zero_disables_and_no_unit_is_read_without_one():
    result, calls = run({"minimum_mb": 0})
    assert calls == [] and result["checked"] is False and result["ok"] is True and result["unit_state"] == ""


def test_an_unknown_unit_counts_as_stopped_and_an_unreadable_state_fails():
    result, _calls = run({"minimum_mb": 1, "unit": "nothing.service"}, unit_state="\n")
    assert result["checked"] is True and result["unit_state"] == "inactive" and result["ok"] is True
    result, _calls = run({"minimum_mb": 1, "unit": "x.service"}, rc=1)
    assert result["failed"] and "cannot read the state of x.service: Failed to connect to bus" == result["msg"]


def test_the_residency_of_given_files(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    data = b"w" * (1 << 20)
    for name in ("a", "b"):
        (blobs / name).write_bytes(data)
        with open(blobs / name, "rb") as handle:
            assert handle.read() == data
    with mock.patch.object(memory_report.hf_cache, "resident_bytes", lambda path: 4096 if path.endswith("a") else 0):
        result, _calls = run({"minimum_mb": 0, "resident_paths": [str(blobs)]})
    assert result["resident_files"] == 2 and result["resident_bytes"] == 4096
    assert "of it the checkpoint's files 0.0 GiB" in result["msg"]
    result, _calls = run({"minimum_mb": 0, "resident_paths": [str(blobs)]})
    assert result["resident_files"] == 2 and 0 <= result["resident_bytes"] <= 2 * len(data)


def test_no_residency_walk_while_the_unit_runs(tmp_path):
    (tmp_path / "blob").write_bytes(b"w" * 4096)
    walked = []
    with mock.patch.object(memory_report.hf_cache, "resident_bytes", lambda path: walked.append(path) or 4096):
        result, _calls = run({"minimum_mb": 1, "unit": "dgxspark-vllm.service", "resident_paths": [str(tmp_path)]},
                             unit_state="active\n")
        assert walked == [] and result["resident_files"] == 0 and "checkpoint's files" not in result["msg"]
        result, _calls = run({"minimum_mb": 1, "unit": "dgxspark-vllm.service", "resident_paths": [str(tmp_path)]})
    assert walked == [str(tmp_path / "blob")] and result["resident_files"] == 1 and result["resident_bytes"] == 4096
