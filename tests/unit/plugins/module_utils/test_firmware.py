# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/firmware.py: the ESRT read from a sysfs tree and the cross-node report."""

from __future__ import absolute_import, division, print_function

import os

from ansible_collections.dgxspark.cluster.plugins.module_utils.firmware import (
    differences,
    failed_attempts,
    nic_differences,
    read_esrt,
    summary,
)

CLASS = "5370a4c5-0000-4000-8000-00000000e5a7"


def write_entry(root, index, **values):
    """An ESRT entry as the kernel's esrt.c prints it (fw_class a GUID, capsule_flags 0x%x, the rest %u)."""
    files = {"fw_class": CLASS.upper(), "fw_type": 1, "fw_version": 65539, "lowest_supported_fw_version": 65536,
             "capsule_flags": "0x8010", "last_attempt_version": 65539, "last_attempt_status": 0}
    files.update(values)
    path = root / "firmware" / "efi" / "esrt" / "entries" / ("entry%d" % index)
    path.mkdir(parents=True)
    for name, value in files.items():
        (path / name).write_text("%s\n" % value)


def test_read_esrt_parses_the_kernels_formats_in_entry_order(tmp_path):
    write_entry(tmp_path, 10, fw_version=2)
    write_entry(tmp_path, 2, fw_class="0c0c0000-0000-4000-8000-000000000002", fw_type=2)
    entries = read_esrt(str(tmp_path))
    assert [e["entry"] for e in entries] == ["entry2", "entry10"]
    assert entries[1] == {"entry": "entry10", "fw_class": CLASS, "fw_type": 1, "fw_version": 2,
                          "lowest_supported_fw_version": 65536, "capsule_flags": 0x8010, "last_attempt_version": 65539,
                          "last_attempt_status": 0}
    assert summary(entries) == {CLASS: "system firmware 2", "0c0c0000-0000-4000-8000-000000000002": "device firmware 65539"}


def test_no_esrt_is_none_not_an_error(tmp_path):
    assert read_esrt(str(tmp_path)) is None
    assert summary(None) is None


def test_an_unreadable_entry_file_raises(tmp_path):
    write_entry(tmp_path, 0)
    path = tmp_path / "firmware" / "efi" / "esrt" / "entries" / "entry0" / "fw_version"
    os.chmod(str(path), 0)
    if os.geteuid() == 0:   # root reads a 0000 file: make it a directory instead, which open() refuses
        path.unlink()
        path.mkdir()
    try:
        read_esrt(str(tmp_path))
    except OSError:
        pass
    else:
        raise AssertionError("an unreadable ESRT file must raise")


def _entries(version, status=0):
    return [{"fw_class": CLASS, "fw_type": 1, "fw_version": version, "last_attempt_status": status,
             "last_attempt_version": version + 1}]


def test_nodes_that_agree_report_nothing():
    assert differences({"spark-head": _entries(65539), "spark-worker": _entries(65539)}, head="spark-head") == []
    assert differences({}) == []


def test_a_node_on_other_firmware_is_named_with_both_versions():
    assert differences({"spark-head": _entries(65539), "spark-worker": _entries(65538)}, head="spark-head") == [
        "spark-worker has system firmware 65538 (%s), spark-head has system firmware 65539" % CLASS]


def test_a_node_without_an_esrt_is_named():
    assert differences({"spark-head": _entries(65539), "spark-worker": None}, head="spark-head") == [
        "spark-worker exports no ESRT, spark-head has one"]


def test_an_update_that_did_not_apply_is_named_on_its_node():
    lines = differences({"spark-head": _entries(65539), "spark-worker": _entries(65539, status=6)}, head="spark-head")
    assert lines == ["spark-worker: the last firmware update of system firmware (%s) did not apply: AC power too low "
                     "(ESRT last_attempt_status 6, version 65540 attempted, 65539 running)" % CLASS]
    assert failed_attempts("h", None) == []


def _fw(*versions):
    return [{"device": "rocep1s0f%d" % i, "firmware": v} for i, v in enumerate(versions)]


def test_firmware_that_agrees_reports_nothing():
    same = _fw("28.45.4028", "28.45.4028")
    assert nic_differences({"spark-head": same, "spark-worker": same}, head="spark-head") == []
    assert nic_differences({}) == []


def test_firmware_that_differs_names_both_nodes_both_versions_and_the_devices():
    lines = nic_differences({"spark-head": _fw("28.45.4028", "28.45.4028"), "spark-worker": _fw("28.39.1002", "28.39.1002"),
                             "spark-worker2": _fw("28.45.4028", "28.45.4028")}, head="spark-head")
    assert lines == ["spark-worker has ConnectX-7 firmware 28.39.1002 (rocep1s0f0, rocep1s0f1), "
                     "spark-head has 28.45.4028 (rocep1s0f0, rocep1s0f1)"]


def test_firmware_not_read_and_mixed_rails_are_named():
    lines = nic_differences({"spark-head": _fw("28.45.4028", "28.39.1002"),
                             "spark-worker": [{"device": "rocep1s0f0", "firmware": None}]}, head="spark-head")
    assert lines[0] == "spark-head has ConnectX-7 firmware 28.39.1002 (rocep1s0f1), 28.45.4028 (rocep1s0f0): its own rails differ"
    assert lines[1].startswith("spark-worker has ConnectX-7 firmware none read, spark-head has ")
