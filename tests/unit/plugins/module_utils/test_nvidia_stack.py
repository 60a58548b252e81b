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
    assert filters["driver_state"].deferred == ("nvidia_stack", "driver_state")
    assert filters["proc_driver_version"].deferred == ("nvidia_stack", "proc_driver_version")
    assert filters["nvcc_release"].deferred == ("nvidia_stack", "nvcc_release")
    assert filters["module_builds"].deferred == ("nvidia_stack", "module_builds")
    assert filters["driver_target"].deferred == ("nvidia_stack", "driver_target")
    assert filters["apt_simulation"].deferred == ("nvidia_stack", "apt_simulation")


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


def stanzas(*rows):
    return "\n".join("Package: %s\nVersion: %s\nDepends: %s\nDescription: x\n spark\n" % row for row in rows) + "\n"


M1014 = "linux-modules-nvidia-580-open-6.17.0-1014-nvidia"
M1026 = "linux-modules-nvidia-580-open-6.17.0-1026-nvidia"
META = "linux-modules-nvidia-580-open-nvidia-hwe-24.04"

# NVIDIA's DGX repository: the module builds say ">=" alone (an apt report quotes
# "linux-modules-nvidia-580-open-6.17.0-1014-nvidia : Depends: nvidia-kernel-common-580 (>= 580.142)"
# and the same for the flavour metapackage), NVIDIA's version format 580.142-1ubuntu1.
DGX = stanzas(
    ("nvidia-kernel-common-580", "580.142-1ubuntu1", "nvidia-modprobe"),
    ("nvidia-kernel-common-580", "580.159.03-1ubuntu1", "nvidia-modprobe"),
    ("nvidia-kernel-common-580", "580.173.02-1ubuntu1", "nvidia-modprobe"),
    (M1014, "6.17.0-1014.14+1", "nvidia-kernel-common-580 (>= 580.142), linux-image-6.17.0-1014-nvidia"),
    (M1014, "6.17.0-1014.14+2", "nvidia-kernel-common-580 (>= 580.159.03), linux-image-6.17.0-1014-nvidia"),
    (M1026, "6.17.0-1026.26+3", "nvidia-kernel-common-580 (>= 580.173.02), linux-image-6.17.0-1026-nvidia"),
    (META, "6.17.0-1014.14+1", "%s (= 6.17.0-1014.14+1), nvidia-kernel-common-580 (>= 580.142)" % M1014),
    (META, "6.17.0-1014.14+2", "%s (= 6.17.0-1014.14+2), nvidia-kernel-common-580 (>= 580.159.03)" % M1014),
)
# Ubuntu's archive (linux-restricted-modules): the pair "(<= V-1), (>= V)" as apt-cache show prints it
# ("nvidia-kernel-common-515-server (<= 515.86.01-1), nvidia-kernel-common-515-server (>= 515.86.01)"), the
# flavour metapackage "(= build)" on its kernel's package plus the same pair; Ubuntu's format -0ubuntu0.24.04.1.
UBUNTU = stanzas(
    ("nvidia-kernel-common-580", "580.142-0ubuntu0.24.04.1", "nvidia-modprobe"),
    ("nvidia-kernel-common-580", "580.159.03-0ubuntu0.24.04.1", "nvidia-modprobe"),
    (M1014, "6.17.0-1014.14+1", "linux-image-6.17.0-1014-nvidia, nvidia-kernel-common-580 (<= 580.142-1), "
                                "nvidia-kernel-common-580 (>= 580.142)"),
    (M1014, "6.17.0-1014.14+2", "linux-image-6.17.0-1014-nvidia, nvidia-kernel-common-580 (<= 580.159.03-1), "
                                "nvidia-kernel-common-580 (>= 580.159.03)"),
    (META, "6.17.0-1014.14+1", "%s (= 6.17.0-1014.14+1), nvidia-kernel-common-580 (<= 580.142-1), "
                               "nvidia-kernel-common-580 (>= 580.142)" % M1014),
    (META, "6.17.0-1014.14+2", "%s (= 6.17.0-1014.14+2), nvidia-kernel-common-580 (<= 580.159.03-1), "
                               "nvidia-kernel-common-580 (>= 580.159.03)" % M1014),
)


@pytest.mark.parametrize("a,op,b,holds", [
    ("580.142-0ubuntu0.24.04.1", "<=", "580.142-1", True),   # Ubuntu's revision stays under the pair's bound
    ("580.142-1ubuntu1", "<=", "580.142-1", False),          # NVIDIA's does not
    ("580.159.03-0ubuntu0.24.04.1", "<=", "580.142-1", False),
    ("580.142-1ubuntu1", ">=", "580.142", True),
    ("580.95.05-1ubuntu1", ">=", "580.142", False),          # 95 < 142 as numbers, not as strings
    ("6.17.0-1014.14+3", "<<", "6.17.0-1014.14+10", True),
    ("1.0~rc1", "<<", "1.0", True),
    ("1:0.9", ">>", "2.0", True),
    ("580.173.02", "=", "580.173.02-0", True),
    ("580.173.02-1ubuntu1", ">>", "580.173.02-1", True),
])
def test_debian_version_relations(a, op, b, holds):
    assert ns.relation_holds(a, op, b) is holds


@pytest.mark.parametrize("text,installed,expected", [
    # a stock DGX OS node on 580.142: the >= form, the build of 580.142 and the metapackage of that build
    (DGX, "580.142-1ubuntu1", {M1014: ["6.17.0-1014.14+1"], META: ["6.17.0-1014.14+1"]}),
    # on 580.173.02 every build whose lower bound it passes fits (apt would take any of them); newest last
    (DGX, "580.173.02-1ubuntu1", {M1014: ["6.17.0-1014.14+1", "6.17.0-1014.14+2"], M1026: ["6.17.0-1026.26+3"],
                                  META: ["6.17.0-1014.14+1", "6.17.0-1014.14+2"]}),
    # Ubuntu's pair admits exactly one driver release
    (UBUNTU, "580.142-0ubuntu0.24.04.1", {M1014: ["6.17.0-1014.14+1"], META: ["6.17.0-1014.14+1"]}),
    (UBUNTU, "580.159.03-0ubuntu0.24.04.1", {M1014: ["6.17.0-1014.14+2"], META: ["6.17.0-1014.14+2"]}),
    (UBUNTU, "580.159.03", {M1014: ["6.17.0-1014.14+2"], META: ["6.17.0-1014.14+2"]}),   # upstream version only
    (UBUNTU, "580.173.02-0ubuntu0.24.04.1", {}),    # no build of that release in the archive
], ids=["dgx-580.142", "dgx-580.173.02", "ubuntu-580.142", "ubuntu-580.159.03", "ubuntu-upstream", "ubuntu-none"])
def test_module_builds_real_dependency_forms(text, installed, expected):
    """Fails on the old module_builds (it counted only "(= V)" dependencies and found no build at all)."""
    assert ns.module_builds(text, installed) == expected


def test_module_builds_branch_fits_some_offered_version():
    assert ns.module_builds(UBUNTU, "580") == {M1014: ["6.17.0-1014.14+1", "6.17.0-1014.14+2"],
                                               META: ["6.17.0-1014.14+1", "6.17.0-1014.14+2"]}
    # offered only 580.159.03 (580.142 superseded and deleted from the archive): the 580.142 build no longer fits
    assert ns.module_builds(UBUNTU, "580", offered=["580.159.03-0ubuntu0.24.04.1"]) == {
        M1014: ["6.17.0-1014.14+2"], META: ["6.17.0-1014.14+2"]}
    assert ns.module_builds(DGX, "590") == {}
    assert ns.module_builds("", "580.173.02") == {}


def test_driver_target():
    # no peers: the newest release of the branch with a build for the running kernel
    assert ns.driver_target(DGX, "580", M1014) == "580.173.02-1ubuntu1"
    assert ns.driver_target(DGX, "580", M1026) == "580.173.02-1ubuntu1"
    assert ns.driver_target(UBUNTU, "580", M1026) == ""    # the archive has no build for that kernel
    assert ns.driver_target(UBUNTU, "580", M1014) == "580.159.03-0ubuntu0.24.04.1"
    # the other nodes agree on 580.142: that one
    assert ns.driver_target(UBUNTU, "580", M1014, ["580.142", "580.142"]) == "580.142-0ubuntu0.24.04.1"
    # they disagree: the newest (the consistency check stops the run later, naming each node)
    assert ns.driver_target(UBUNTU, "580", M1014, ["580.142", "580.159.03"]) == "580.159.03-0ubuntu0.24.04.1"
    assert ns.driver_target(DGX, "580.159.03") == "580.159.03-1ubuntu1"   # DKMS: no module constraint
    assert ns.driver_target(DGX, "580.178.04") == ""


# --------------------------------------------------------------------------- the kernel flavour held with the driver
# Names from Ubuntu's linux-nvidia-6.17 source (6.17.0-1017.17 .dsc: linux-modules-, linux-headers-, linux-tools-,
# linux-buildinfo-, linux-modules-nvidia-fs-<abi>-nvidia, linux-nvidia-6.17-headers-<abi>, the -nvidia-64k twins).
KERNEL_DPKG = dpkg(
    ("linux-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14"),
    ("linux-image-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14"),
    ("linux-headers-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14"),
    ("linux-image-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14"),
    ("linux-modules-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14"),
    ("linux-headers-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14"),
    ("linux-nvidia-6.17-headers-6.17.0-1014", "ii ", "6.17.0-1014.14"),
    ("linux-modules-nvidia-580-open-6.17.0-1014-nvidia", "hi ", "6.17.0-1014.14+3"),
    ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "ii ", "6.17.0-1014.14+3"),
    ("linux-image-6.11.0-1016-nvidia-64k", "ii ", "6.11.0-1016.16"),
    ("linux-image-6.8.0-40-generic", "rc ", "6.8.0-40.40"),
    ("linux-firmware", "ii ", "20240318.git3b128b60-0ubuntu2"),
    ("linux-libc-dev", "ii ", "6.8.0-90.91"),
)


def test_kernel_set_holds_the_flavour_and_nothing_else():
    got = ns.kernel_set(KERNEL_DPKG, "6.17.0-1014-nvidia")
    assert got["flavours"] == ["nvidia-hwe-24.04"]
    assert got["suffix"] == "nvidia"
    assert got["releases"] == ["6.17.0-1014-nvidia"]
    assert sorted(got["packages"]) == [
        "linux-headers-6.17.0-1014-nvidia", "linux-headers-nvidia-hwe-24.04", "linux-image-6.17.0-1014-nvidia",
        "linux-image-nvidia-hwe-24.04", "linux-modules-6.17.0-1014-nvidia", "linux-nvidia-6.17-headers-6.17.0-1014",
        "linux-nvidia-hwe-24.04"]
    assert got["packages"]["linux-image-nvidia-hwe-24.04"] == "6.17.0-1014.14"


@pytest.mark.parametrize("name, covered", [
    ("linux-image-nvidia-hwe-24.04", True),
    ("linux-headers-nvidia-hwe-24.04", True),
    ("linux-nvidia-hwe-24.04", True),
    ("linux-tools-nvidia-hwe-24.04", True),
    ("linux-modules-nvidia-580-open-nvidia-hwe-24.04", True),
    ("linux-image-6.17.0-1035-nvidia", True),             # a release not installed yet
    ("linux-modules-6.17.0-1035-nvidia", True),
    ("linux-headers-6.17.0-1014-nvidia", True),
    ("linux-modules-nvidia-fs-6.17.0-1017-nvidia", True),
    ("linux-modules-nvidia-580-open-6.17.0-1035-nvidia", True),
    ("linux-nvidia-6.17-headers-6.17.0-1035", True),
    ("linux-nvidia-6.17-tools-6.17.0-1035", True),
    ("linux-image-6.17.0-1035-nvidia-64k", False),        # another flavour
    ("linux-image-nvidia-64k-hwe-24.04", False),
    ("linux-image-generic-hwe-24.04", False),
    ("linux-image-6.8.0-40-generic", False),
    ("linux-firmware", False),
    ("linux-libc-dev", False),
    ("linux-base", False),
    ("nvidia-hwe-24.04", False),
])
def test_kernel_blacklist_matches_as_unattended_upgrades_does(name, covered):
    """unattended-upgrades' is_pkgname_in_blacklist: any(re.match(regexp, pkgname) for regexp in blacklist)."""
    import re
    blacklist = ns.kernel_set(KERNEL_DPKG, "6.17.0-1014-nvidia")["blacklist"]
    assert any(re.match(regexp, name) for regexp in blacklist) is covered


def test_kernel_set_without_a_flavour_metapackage_uses_the_running_suffix():
    got = ns.kernel_set(dpkg(("linux-image-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14"),
                             ("linux-modules-6.17.0-1014-nvidia", "ii ", "6.17.0-1014.14")), "6.17.0-1014-nvidia")
    assert got["flavours"] == []
    assert sorted(got["packages"]) == ["linux-image-6.17.0-1014-nvidia", "linux-modules-6.17.0-1014-nvidia"]
    assert got["blacklist"][0].endswith("-nvidia$")


@pytest.mark.parametrize("flavour, suffix", [("nvidia-hwe-24.04", "nvidia"), ("nvidia-64k-hwe-24.04", "nvidia-64k"),
                                             ("generic-hwe-24.04", "generic"), ("nvidia", "nvidia")])
def test_flavour_kernel_suffix(flavour, suffix):
    assert ns.flavour_kernel_suffix(flavour) == suffix


IMAGE_META_SHOW = """Package: linux-image-nvidia-hwe-24.04
Version: 6.17.0-1014.14
Depends: linux-image-6.17.0-1014-nvidia (= 6.17.0-1014.14)

Package: linux-image-nvidia-hwe-24.04
Version: 6.17.0-1035.35
Depends: linux-image-6.17.0-1035-nvidia (= 6.17.0-1035.35)

Package: linux-image-nvidia-hwe-24.04
Version: 6.17.0-1026.26
Depends: linux-image-6.17.0-1026-nvidia (= 6.17.0-1026.26)
"""


def test_kernel_offer_is_the_newest_version_and_its_kernel():
    offer = ns.kernel_offer(IMAGE_META_SHOW, "nvidia-hwe-24.04")
    assert offer == {"version": "6.17.0-1035.35", "release": "6.17.0-1035-nvidia"}
    assert ns.kernel_offer("", "nvidia-hwe-24.04") == {"version": "", "release": ""}


def test_kernel_filters_are_registered():
    filters = FilterModule().filters()
    assert filters["kernel_set"].deferred == ("nvidia_stack", "kernel_set")
    assert filters["kernel_offer"].deferred == ("nvidia_stack", "kernel_offer")


def test_kernel_blacklist_reads_as_package_names():
    assert ns.kernel_set(KERNEL_DPKG, "6.17.0-1014-nvidia")["blacklist"] == [
        r"linux-(.+-)?nvidia-hwe-24\.04$",
        r"linux-.+-[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-nvidia$",
        r"linux-nvidia(-[0-9.]+)?-(headers|tools|cloud-tools)-[0-9]+\.[0-9]+\.[0-9]+-[0-9]+$"]
