# -*- coding: utf-8 -*-
"""Unit tests for plugins/modules/converged.py: record writes a 0600 stamp once, check reads it back, check mode writes nothing."""

from __future__ import annotations

import os
import stat
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dgxspark.cluster.plugins.modules import converged
from modtest import ExitJson, FailJson, exit_json as _exit_json, fail_json as _fail_json


def run(args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), \
            mock.patch.object(basic.AnsibleModule, "run_command", lambda self, argv, **kw: (0, "out\n", "")):
        with pytest.raises((ExitJson, FailJson)) as result:
            converged.main()
    return result.value.args[0]


def test_record_then_check(tmp_path):
    conf = tmp_path / "conf"
    conf.write_text("a\n")
    stamps = tmp_path / "stamps"
    record = dict(path=str(stamps), roles=["nic"], inputs="i1", state="record",
                  resources={"paths": [str(conf)], "commands": [{"argv": ["show_gids"]}]})
    assert run(record, check_mode=True)["changed"] is True
    assert not stamps.exists(), "check mode writes nothing"
    first = run(record)
    assert first["changed"] is True and first["stamp"] == str(stamps / "nic.json")
    assert stat.S_IMODE(os.stat(stamps / "nic.json").st_mode) == 0o600
    assert run(record)["changed"] is False

    check = dict(path=str(stamps), roles=["nic"], inputs="i1")
    assert run(check) == {"changed": False, "converged": True, "drift": []}
    conf.write_text("b\n")
    result = run(check)
    assert result["converged"] is False and result["drift"][0].startswith("nic: path:%s: was file" % conf)
    missing = run(dict(check, roles=["nic", "driver"]))
    assert "driver: no stamp (no complete run recorded on this node)" in missing["drift"]


def test_record_refuses_two_roles_and_bad_resources(tmp_path):
    base = dict(path=str(tmp_path), inputs="i", state="record")
    two = run(dict(base, roles=["nic", "driver"]))
    assert two["failed"] and "one role at a time" in two["msg"]
    bad = run(dict(base, roles=["nic"], resources={"files": ["/etc"]}))
    assert bad["failed"] and bad["msg"] == "converged: role nic: unknown resource kind(s) files; expected " \
        "paths, trees, packages, units, users, groups, commands"
    assert not (tmp_path / "nic.json").exists()
