# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/nvidia_stack.py: the parsers the driver
and cuda roles read a node with, and the driver classification (one case per
situation the role must tell apart)."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.filter.nvidia_stack import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import nvidia_stack as ns

PINS = ["nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
        "libnvidia-compute-580", "libnvidia-common-580"]


def dpkg(*rows):
    """dpkg-query -W -f='${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' output."""
    return "".join("%s\t%s\t%s\n" % row for row in rows)


def driver_rows(version, status="ii ", names=None):
    return [(name, status, "%s-0ubuntu1" % version) for name in (PINS if names is None else names)]


PINNED = dpkg(*driver_rows("580.173.02", "hi "), ("nvidia-driver-pinning-580", "ii ", "580-1"),
              ("libnvidia-container1", "ii ", "1.17.8-1"), ("nvidia-driver-open", "un ", ""))


def test_upstream_version():
    assert ns.upstream_version("580.173.02-0ubuntu1") == "580.173.02"
    assert ns.upstream_version("1:580.95.05-0ubuntu0.24.04.2") == "580.95.05"
    assert ns.upstream_version("13.0.88-1") == "13.0.88"
    assert ns.upstream_version("") == ""


@pytest.mark.parametrize("spec,kind", [("580.173.02", "exact"), ("580.142", "exact"), ("580", "branch"),
                                       ("590.48.01", "exact"), ("58", "invalid"), ("580.x", "invalid"),
                                       ("latest", "invalid")])
def test_version_spec_kind(spec, kind):
    assert ns.version_spec_kind(spec) == kind


def test_version_matches_exact_and_branch():
    assert ns.version_matches("580.173.02", "580.173.02")
    assert not ns.version_matches("580.178.04", "580.173.02")
    assert ns.version_matches("580.178.04", "580")
    assert not ns.version_matches("590.48.01", "580")


def test_parse_dpkg_query_keeps_status_and_hold():
    pkgs = {p["package"]: p for p in ns.parse_dpkg_query(PINNED)}
    assert pkgs["nvidia-utils-580"] == {"package": "nvidia-utils-580", "status": "hi", "version": "580.173.02-0ubuntu1",
                                        "upstream": "580.173.02", "installed": True, "held": True}
    assert pkgs["nvidia-driver-open"]["installed"] is False
    assert ns.parse_dpkg_query("") == []


def test_pinned_node_is_ok_and_ignores_non_driver_versions():
    state = ns.driver_state(PINNED, "580.173.02", PINS)
    assert state["state"] == "ok"
    assert state["version"] == "580.173.02"
    assert list(state["versions"]) == ["580.173.02"]  # not 580-1 (pinning package) nor 1.17.8 (container lib)
    assert state["held"] == sorted(PINS)
    assert state["pins_missing"] == []
    assert state["packages"]["libnvidia-compute-580"] == "580.173.02"


def test_no_driver_is_absent():
    state = ns.driver_state(dpkg(("nvidia-driver-pinning-580", "ii ", "580-1"), ("nvidia-utils-580", "rc ", "580.95.05-0ubuntu1")),
                            "580.173.02", PINS)
    assert state["state"] == "absent"
    assert state["version"] == "" and state["summary"] == ""
    assert state["pins_missing"] == PINS


def test_another_version_is_other_and_named():
    state = ns.driver_state(dpkg(*driver_rows("580.159.03")), "580.173.02", PINS)
    assert state["state"] == "other"
    assert state["version"] == "580.159.03"
    assert state["summary"].startswith("580.159.03 (libnvidia-common-580, libnvidia-compute-580")


def test_branch_accepts_any_version_of_the_branch():
    assert ns.driver_state(dpkg(*driver_rows("580.159.03")), "580", PINS)["state"] == "ok"
    assert ns.driver_state(dpkg(*driver_rows("590.48.01", names=["libnvidia-compute"])), "580", PINS)["state"] == "other"


def test_partial_upgrade_is_other_with_both_versions():
    """unattended-upgrades bumped libnvidia-common alone: two versions installed."""
    rows = driver_rows("580.173.02", names=PINS[:-1]) + driver_rows("580.178.04", names=PINS[-1:])
    state = ns.driver_state(dpkg(*rows), "580.173.02", PINS)
    assert state["state"] == "other"
    assert state["version"] == ""
    assert state["versions"]["580.178.04"] == ["libnvidia-common-580"]
    assert "580.173.02 (" in state["summary"] and "580.178.04 (libnvidia-common-580)" in state["summary"]


def test_590_names_do_not_match_580_pins():
    names = ["nvidia-driver-open", "nvidia-dkms-open", "libnvidia-compute"]
    state = ns.driver_state(dpkg(*driver_rows("590.48.01", names=names)), "590.48.01", ["nvidia-driver-open", "libnvidia-compute-580"])
    assert state["state"] == "ok"
    assert state["pins_missing"] == ["libnvidia-compute-580"]


def test_pins_missing_lists_every_pin_not_installed():
    state = ns.driver_state(dpkg(*driver_rows("580.173.02", names=PINS[:2])), "580.173.02", PINS)
    assert state["state"] == "ok"
    assert state["pins_missing"] == PINS[2:]


def test_proc_driver_version_open_and_proprietary_modules():
    open_module = ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  "
                   "(dvs-builder@U16-I2-C01-12-4)  Mon Dec 30 17:33:24 UTC 2024\nGCC version:  gcc version 12.3.0\n")
    assert ns.proc_driver_version(open_module) == "580.173.02"
    proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
    assert ns.proc_driver_version(proprietary) == "580.173.02"
    assert ns.proc_driver_version("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 2024\n") == "550.120"
    assert ns.proc_driver_version("") == ""


def test_nvcc_release():
    text = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2026 NVIDIA Corporation\n"
            "Built on Tue_Jun_09_02:43:40_PM_PDT_2026\nCuda compilation tools, release 13.3, V13.3.73\n"
            "Build cuda_13.3.r13.3/compiler.38244171_0\n")
    assert ns.nvcc_release(text) == {"release": "13.3", "version": "13.3.73"}
    assert ns.nvcc_release("bash: nvcc: command not found") == {"release": "", "version": ""}


def test_apt_simulation():
    text = ("NOTE: This is only a simulation!\n"
            "Inst nvidia-kernel-common (590.48.01-0ubuntu1 NVIDIA CUDA:localhost [amd64])\n"
            "Inst nvidia-utils-580 [580.173.02-0ubuntu1] (580.178.04-0ubuntu1 NVIDIA CUDA:localhost [amd64]) []\n"
            "Remv nvidia-driver-580-open [580.173.02-0ubuntu1]\n"
            "Conf nvidia-kernel-common (590.48.01-0ubuntu1 NVIDIA CUDA:localhost [amd64])\n")
    assert ns.apt_simulation(text) == [
        {"action": "Inst", "package": "nvidia-kernel-common", "version": "590.48.01-0ubuntu1"},
        {"action": "Inst", "package": "nvidia-utils-580", "version": "580.178.04-0ubuntu1"},
        {"action": "Remv", "package": "nvidia-driver-580-open", "version": "580.173.02-0ubuntu1"},
    ]
    assert ns.apt_simulation("0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n") == []


def test_filters_are_registered():
    filters = FilterModule().filters()
    assert filters["driver_state"] is ns.driver_state
    assert filters["proc_driver_version"] is ns.proc_driver_version
    assert filters["nvcc_release"] is ns.nvcc_release
    assert filters["apt_simulation"] is ns.apt_simulation


# A stock DGX OS 7 node (sim/apt-repo's stock profile, names from public Spark captures): the precompiled module
# of the running kernel and its flavour metapackage, nvidia-modprobe and the firmware at versions of their own.
STOCK_USERSPACE = ("nvidia-driver-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
                   "libnvidia-compute-580", "libnvidia-common-580")
STOCK = dpkg(
    *[(n, "ii ", "580.173.02-1ubuntu1") for n in STOCK_USERSPACE],
    ("nvidia-firmware-580-580.173.02", "ii ", "580.173.02-1ubuntu1"),
    ("nvidia-firmware-580-580.159.03", "ii ", "580.159.03-1ubuntu1"),   # left over from the previous driver
    ("nvidia-modprobe", "ii ", "580.126.09-1ubuntu1"),
    ("nvidia-driver-pinning-580", "ii ", "580-1"),
    ("nvidia-driver-pinning-580.173.02", "ii ", "580.173.02-1"),
    ("linux-modules-nvidia-580-open-6.17.0-1014-nvidia", "hi ", "6.17.0-1014.14+3"),
    ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14+3"),
    ("linux-image-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14"),
    ("linux-image-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14"),
    ("nvidia-dkms-580-open", "un ", ""))


def test_stock_node_counts_only_the_driver_set():
    state = ns.driver_state(STOCK, "580.173.02", [], "6.17.0-1014-nvidia")
    assert state["state"] == "ok" and state["version"] == "580.173.02"
    assert sorted(state["packages"]) == ["libnvidia-common-580", "libnvidia-compute-580", "nvidia-driver-580-open",
                                         "nvidia-kernel-common-580", "nvidia-utils-580"]
    assert state["own_version"] == {"nvidia-firmware-580-580.173.02": "580.173.02-1ubuntu1",
                                    "nvidia-firmware-580-580.159.03": "580.159.03-1ubuntu1",
                                    "nvidia-modprobe": "580.126.09-1ubuntu1", "nvidia-driver-pinning-580": "580-1",
                                    "nvidia-driver-pinning-580.173.02": "580.173.02-1"}
    assert state["layout"] == "precompiled" and state["dkms"] == []
    assert state["module_kernels"] == ["linux-modules-nvidia-580-open-6.17.0-1014-nvidia"]
    assert state["module_metas"] == ["linux-modules-nvidia-580-open-nvidia-hwe-24.04"]
    assert state["kernel_module"] == "linux-modules-nvidia-580-open-6.17.0-1014-nvidia"
    assert state["kernel_flavours"] == ["nvidia-hwe-24.04"]
    assert state["kernels"] == ["6.17.0-1014-nvidia"]
    assert "linux-modules-nvidia-580-open-6.17.0-1014-nvidia" in state["held"]


def test_modprobe_at_another_version_is_not_another_driver():
    # without the exclusion nvidia-modprobe 580.126.09 read as a second driver version: state "other"
    state = ns.driver_state(STOCK, "580.173.02", [], "6.17.0-1026-nvidia")
    assert state["state"] == "ok" and list(state["versions"]) == ["580.173.02"]
    assert state["kernel_module"] == ""   # a kernel without its module: the role installs it


def test_dkms_layout():
    text = dpkg(*driver_rows("580.159.03", names=PINS), ("linux-image-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14"))
    state = ns.driver_state(text, "580.159.03", [], "6.17.0-1014-nvidia")
    assert state["layout"] == "dkms" and state["dkms"] == ["nvidia-dkms-580-open"]
    assert state["modules"] == {} and state["kernel_module"] == ""


APT_SHOW = "\n".join(
    "Package: %s\nVersion: %s\nDepends: %s\nDescription: x\n spark\n" % row for row in [
        ("linux-modules-nvidia-580-open-6.17.0-1026-nvidia", "6.17.0-1026.26+3",
         "nvidia-kernel-common-580 (= 580.173.02-1ubuntu1), linux-image-6.17.0-1026-nvidia"),
        ("linux-modules-nvidia-580-open-6.17.0-1026-nvidia", "6.17.0-1026.26+4",
         "nvidia-kernel-common-580 (= 580.178.04-1ubuntu1), linux-image-6.17.0-1026-nvidia"),
        ("linux-modules-nvidia-580-open-6.17.0-1014-nvidia", "6.17.0-1014.14+3",
         "nvidia-kernel-common-580 (= 580.173.02-1ubuntu1), linux-image-6.17.0-1014-nvidia"),
        ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "6.17.0-1026.26+3",
         "linux-modules-nvidia-580-open-6.17.0-1026-nvidia (= 6.17.0-1026.26+3)"),
        ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "6.17.0-1026.26+4",
         "linux-modules-nvidia-580-open-6.17.0-1026-nvidia (= 6.17.0-1026.26+4)"),
        ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "6.17.0-1014.14+3",
         "linux-modules-nvidia-580-open-6.17.0-1014-nvidia (= 6.17.0-1014.14+3)"),
    ]) + "\n"


def test_module_builds_fit_the_driver():
    assert ns.module_builds(APT_SHOW, "580.173.02") == {
        "linux-modules-nvidia-580-open-6.17.0-1014-nvidia": ["6.17.0-1014.14+3"],
        "linux-modules-nvidia-580-open-6.17.0-1026-nvidia": ["6.17.0-1026.26+3"],
        "linux-modules-nvidia-580-open-nvidia-hwe-24.04": ["6.17.0-1014.14+3", "6.17.0-1026.26+3"]}
    assert ns.module_builds(APT_SHOW, "580.178.04") == {
        "linux-modules-nvidia-580-open-6.17.0-1026-nvidia": ["6.17.0-1026.26+4"],
        "linux-modules-nvidia-580-open-nvidia-hwe-24.04": ["6.17.0-1026.26+4"]}
    assert len(ns.module_builds(APT_SHOW, "580")["linux-modules-nvidia-580-open-nvidia-hwe-24.04"]) == 3
    assert ns.module_builds(APT_SHOW, "590.48.01") == {}
    assert ns.module_builds("", "580.173.02") == {}
