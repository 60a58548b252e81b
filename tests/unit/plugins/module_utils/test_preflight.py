# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/preflight.py (paths agreeing across nodes, free disk for the checkpoint)."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.filter.preflight import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import preflight as pf

HUB = "/var/lib/dgxspark/huggingface/hub"
NAMES = ["checkpoint_cache_dir", "runtime_hf_hub_cache", "runtime_venv_dir"]


def values(**per_host):
    base = {"checkpoint_cache_dir": HUB, "runtime_hf_hub_cache": "", "runtime_venv_dir": "/opt/dgxspark/vllm"}
    return dict((host, dict(base, **changes)) for host, changes in per_host.items())


def test_the_same_paths_everywhere_are_fine():
    assert pf.value_disagreements(values(head={}, worker={}), NAMES, allow_empty=["runtime_hf_hub_cache"]) == []


def test_a_path_set_per_host_names_every_host_and_value():
    problems = pf.value_disagreements(values(head={}, w1={"checkpoint_cache_dir": "/data/hub"}, w2={}), NAMES,
                                      allow_empty=["runtime_hf_hub_cache"])
    assert problems == ["checkpoint_cache_dir differs between the nodes: head=%s, w1=/data/hub, w2=%s; the head and the "
                        "workers must use the same path (set it once in group_vars/all, not per host)" % (HUB, HUB)]


@pytest.mark.parametrize("bad, shown", [("opt/vllm", "(opt/vllm)"), ("", "('')"), (None, "(None)"), (3, "(3)")])
def test_a_path_that_is_not_absolute(bad, shown):
    problems = pf.value_disagreements(values(head={}, worker={"runtime_venv_dir": bad}), NAMES,
                                      allow_empty=["runtime_hf_hub_cache"])
    assert problems == ["runtime_venv_dir is not an absolute path on worker %s; expected an absolute path, the same on "
                        "every node" % shown]


def test_empty_is_allowed_only_where_asked():
    problems = pf.value_disagreements(values(head={}, worker={}), NAMES)
    assert len(problems) == 1 and problems[0].startswith("runtime_hf_hub_cache is not an absolute path on head (''), worker ('')")
    mixed = pf.value_disagreements(values(head={}, worker={"runtime_hf_hub_cache": HUB}), NAMES,
                                   allow_empty=["runtime_hf_hub_cache"])
    assert mixed == ["runtime_hf_hub_cache differs between the nodes: head='', worker=%s; the head and the workers must "
                     "use the same path (set it once in group_vars/all, not per host)" % HUB]


def test_names_default_to_every_name_and_missing_is_named():
    problems = pf.value_disagreements({"head": {"a": "/x"}, "worker": {"a": "/x", "b": "/y"}})
    assert problems == ["b is not an absolute path on head (None); expected an absolute path, the same on every node"]


def test_filter_is_registered():
    assert FilterModule().filters()["value_disagreements"] is pf.value_disagreements


@pytest.mark.parametrize("path, existing, expect", [
    (HUB, {"/", "/var", "/var/lib"}, "/var/lib"),
    (HUB, {"/", "/var", "/var/lib", "/var/lib/dgxspark", "/var/lib/dgxspark/huggingface", HUB}, HUB),
    (HUB + "/", {"/", "/var", "/var/lib", "/var/lib/dgxspark", "/var/lib/dgxspark/huggingface", HUB}, HUB),
    ("/mnt/nvme/../data/hub", {"/", "/mnt", "/mnt/data"}, "/mnt/data"),
    ("/nowhere/at/all", {"/"}, "/"),
    ("relative/hub", {"/"}, "/"),
])
def test_nearest_existing_dir(path, existing, expect):
    assert pf.nearest_existing_dir(path, lambda p: p in existing) == expect


def test_bytes_needed():
    assert pf.bytes_needed(170, 0) == 170 * 10 ** 9
    assert pf.bytes_needed(170, 167 * 10 ** 9) == 3 * 10 ** 9
    assert pf.bytes_needed(170, 200 * 10 ** 9) == 0
    assert pf.bytes_needed(0, 0) == 0
