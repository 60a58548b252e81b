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
    found = FilterModule().filters()["value_disagreements"]
    assert found.deferred == ("preflight", "value_disagreements")   # module_utils/preflight.py, loaded at the first call
    assert found({"h": {"a": "/x"}}, ["a"]) == pf.value_disagreements({"h": {"a": "/x"}}, ["a"])


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


# --------------------------------------------------------------------------- issue 24, finding 9

def test_port_collisions_name_both_variables_once_each():
    from ansible_collections.dgxspark.cluster.plugins.module_utils.preflight import port_collisions
    ports = [["runtime_vllm_port", 8888], ["runtime_vllm_master_port", 25000], ["preflight_fabric_ssh_port (sshd)", 22],
             ["checkpoint_daemon_port", 8873], ["runtime_container_transfer_port", 8873], ["nic_bandwidth_tcp_port", 18515],
             ["nic_bandwidth_tcp_port + 1 (rail 1)", "8888"]]
    assert port_collisions(ports) == ["runtime_vllm_port and nic_bandwidth_tcp_port + 1 (rail 1) are both 8888",
                                      "checkpoint_daemon_port and runtime_container_transfer_port are both 8873"]
    assert port_collisions(ports[:3]) == []
    assert port_collisions([["a", "not a port"], ["b", None]]) == []   # the type check names those


# distribution/reference's grammar (reference.go) and regexp.go's patterns; the cases are the ones its
# reference_test.go gives, as docker parses them.
@pytest.mark.parametrize("ref", [
    "ghcr.io/anemll/dspark-vllm-gx10:0.1.1", "spark-sim/vllm-standin:latest", "ubuntu", "localhost:5000/a/b:c",
    "registry.example.com:5000/team/image@sha256:" + "a" * 64, "[2001:db8::1]:5000/img:tag", "a__b/c--d.e_f:T.a-g",
    "ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:" + "0" * 64, "a" * 255,
])
def test_image_reference_accepts_what_docker_parses(ref):
    from ansible_collections.dgxspark.cluster.plugins.module_utils.preflight import image_reference_problem
    assert image_reference_problem(ref) == ""


@pytest.mark.parametrize("ref, reason", [
    ("ghcr.io/Anemll/dspark-vllm-gx10:0.1.1", "repository name must be lowercase"),
    ("ghcr.io/anemll/dspark:0.1:1", "invalid reference format"),
    ("ghcr.io/anemll/dspark:0.1.1\n", "invalid reference format"),        # Python's $ would let this through
    ("ghcr.io/anemll/dspark vllm:0.1.1", "invalid reference format"),
    ("ghcr.io/anemll/dspark:-bad", "invalid reference format"),
    ("ghcr.io/anemll/dspark:" + "t" * 129, "invalid reference format"),
    ("ghcr.io/anemll/dspark@sha256:abc", "invalid reference format"),
    ("ghcr.io/anemll/dspark:0.1.\u00e9", "invalid reference format"),      # \w is ASCII in Go's regexp
    ("a" * 256, "must not be more than 255 characters"),
    ("", "empty"),
    (None, "empty"),
])
def test_image_reference_refuses_what_docker_refuses(ref, reason):
    from ansible_collections.dgxspark.cluster.plugins.module_utils.preflight import image_reference_problem
    assert reason in image_reference_problem(ref)
