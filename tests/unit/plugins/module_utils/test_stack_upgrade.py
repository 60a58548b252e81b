# -*- coding: utf-8 -*-
"""Unit tests for plugins/module_utils/stack_upgrade.py: what upgrade.yml moves a node to (the kernel, the module
build and the driver as one apt transaction) and where a rollback finds the old packages. The apt stanzas follow
NVIDIA's DGX repository form (a module build depends on ``nvidia-kernel-common-580 (>= its driver)``, never ``=``)
and Ubuntu's kernel metapackages (``linux-image-<flavour>`` depends ``linux-image-<release> (= version)``)."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.filter.stack_upgrade import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import stack_upgrade as su

USERSPACE = ["libnvidia-common-580", "libnvidia-compute-580", "nvidia-driver-580-open", "nvidia-kernel-common-580",
             "nvidia-utils-580"]
DRIVERS = ("580.159.03", "580.173.02", "580.178.04")
KERNELS = (("6.17.0-1014-nvidia", "6.17.0-1014.14"), ("6.17.0-1026-nvidia", "6.17.0-1026.26"))
FLAVOUR = "nvidia-hwe-24.04"


def dpkg(driver="580.173.02", kernel=KERNELS[0], build=2, status="hi "):
    rows = [(name, status, "%s-1ubuntu1" % driver) for name in USERSPACE]
    release, version = kernel
    rows += [("linux-image-%s" % release, status, version), ("linux-modules-%s" % release, status, version),
             ("linux-headers-%s" % release, status, version), ("linux-image-%s" % FLAVOUR, status, version),
             ("linux-headers-%s" % FLAVOUR, status, version), ("linux-%s" % FLAVOUR, status, version),
             ("linux-modules-nvidia-580-open-%s" % release, status, "%s+%d" % (version, build)),
             ("linux-modules-nvidia-580-open-%s" % FLAVOUR, status, "%s+%d" % (version, build)),
             ("nvidia-modprobe", "ii ", "580.126.09-1ubuntu1"), ("nvidia-dkms-580-open", "un ", "")]
    return "".join("%s\t%s\t%s\n" % row for row in rows)


def stanza(name, version, depends):
    return "Package: %s\nVersion: %s\nArchitecture: arm64\nDepends: %s\n" % (name, version, depends)


def show(drivers=DRIVERS, kernels=KERNELS):
    """apt-cache show of the flavour's image metapackage, nvidia-kernel-common-580 and the module packages."""
    parts = [stanza("linux-image-%s" % FLAVOUR, v, "linux-image-%s (= %s)" % (r, v)) for r, v in kernels]
    parts += [stanza("nvidia-kernel-common-580", "%s-1ubuntu1" % d, "nvidia-modprobe") for d in drivers]
    for release, version in kernels:
        for driver in drivers:
            build = "%s+%d" % (version, DRIVERS.index(driver) + 1)
            module = "linux-modules-nvidia-580-open-%s" % release
            parts.append(stanza(module, build, "nvidia-kernel-common-580 (>= %s), linux-image-%s" % (driver, release)))
            parts.append(stanza("linux-modules-nvidia-580-open-%s" % FLAVOUR, build,
                                "%s (= %s), nvidia-kernel-common-580 (>= %s)" % (module, build, driver)))
    return "\n".join(parts)


def test_a_branch_moves_kernel_and_driver_to_the_newest_release_with_a_build_for_the_new_kernel():
    plan = su.upgrade_target(dpkg(), show(), KERNELS[0][0], "580")
    assert plan["moves"] and plan["problem"] == ""
    assert plan["summary"] == "kernel 6.17.0-1014-nvidia -> 6.17.0-1026-nvidia, NVIDIA driver 580.173.02 -> 580.178.04"
    assert plan["install"] == (
        ["%s=580.178.04-1ubuntu1" % name for name in USERSPACE]
        + ["linux-modules-nvidia-580-open-6.17.0-1026-nvidia=6.17.0-1026.26+3",
           "linux-modules-nvidia-580-open-nvidia-hwe-24.04=6.17.0-1026.26+3",
           "linux-modules-nvidia-580-open-6.17.0-1014-nvidia=6.17.0-1014.14+3",
           "linux-headers-nvidia-hwe-24.04=6.17.0-1026.26", "linux-image-nvidia-hwe-24.04=6.17.0-1026.26",
           "linux-nvidia-hwe-24.04=6.17.0-1026.26"])


def test_an_exact_version_is_the_target_and_the_kernel_may_stay():
    plan = su.upgrade_target(dpkg(), show(), KERNELS[0][0], "580.178.04", move_kernel=False)
    assert plan["summary"] == "NVIDIA driver 580.173.02 -> 580.178.04"
    assert plan["kernel"] == {"from": KERNELS[0][0], "to": KERNELS[0][0], "version": ""}
    assert not [item for item in plan["install"] if item.startswith(("linux-image", "linux-headers", "linux-nvidia"))]
    assert "linux-modules-nvidia-580-open-nvidia-hwe-24.04=6.17.0-1014.14+3" in plan["install"]


def test_the_same_driver_with_a_newer_kernel_moves_only_the_kernel_and_its_build():
    plan = su.upgrade_target(dpkg("580.178.04", build=3), show(), KERNELS[0][0], "580")
    assert plan["summary"] == "kernel 6.17.0-1014-nvidia -> 6.17.0-1026-nvidia, NVIDIA driver 580.178.04 (a build for the new kernel)"


def test_nothing_newer_moves_nothing():
    plan = su.upgrade_target(dpkg("580.178.04", KERNELS[1], 3), show(), KERNELS[1][0], "580")
    assert not plan["moves"] and plan["install"] == [] and plan["problem"] == ""
    assert plan["summary"] == "kernel 6.17.0-1026-nvidia and NVIDIA driver 580.178.04: nothing newer to move to"


def test_an_archive_that_moved_on_offers_the_new_kernel_only_with_the_new_driver():
    """The advanced archive: 6.17.0-1035 with builds only for 580.178.04, the older releases gone."""
    kernels = KERNELS + (("6.17.0-1035-nvidia", "6.17.0-1035.35"),)
    plan = su.upgrade_target(dpkg(), show(("580.178.04",), kernels), KERNELS[0][0], "580")
    assert plan["summary"] == "kernel 6.17.0-1014-nvidia -> 6.17.0-1035-nvidia, NVIDIA driver 580.173.02 -> 580.178.04"
    exact = su.upgrade_target(dpkg(), show(("580.178.04",), kernels), KERNELS[0][0], "580.173.02")
    assert not exact["moves"]
    assert exact["problem"] == ("the repositories offer no NVIDIA driver 580.173.02 with a module build for kernel "
                                "6.17.0-1035-nvidia (linux-modules-nvidia-580-open-6.17.0-1035-nvidia)")


def test_a_node_without_a_driver_cannot_move():
    rows = "".join(line + "\n" for line in dpkg().splitlines() if not line.startswith(tuple(USERSPACE)))
    plan = su.upgrade_target(rows, show(), KERNELS[0][0], "580")
    assert not plan["moves"] and plan["problem"].startswith("no single NVIDIA driver is installed")


def test_the_show_texts_may_come_apart():
    text = show()
    head, rest = text.split("\n\n", 1)
    assert su.upgrade_target(dpkg(), [head, rest], KERNELS[0][0], "580") == su.upgrade_target(dpkg(), text, KERNELS[0][0], "580")


SIMULATION = """NOTE: This is only a simulation!
Inst nvidia-utils-580 [580.173.02-1ubuntu1] (580.178.04-1ubuntu1 spark-sim NVIDIA:local [arm64])
Inst linux-image-6.17.0-1026-nvidia (6.17.0-1026.26 spark-sim Ubuntu:local [arm64])
Remv nvidia-modprobe [580.126.09-1ubuntu1]
Conf nvidia-utils-580 (580.178.04-1ubuntu1 spark-sim NVIDIA:local [arm64])
"""


def test_simulated_changes_name_what_is_replaced_at_its_installed_version():
    result = su.simulated_changes(SIMULATION, dpkg())
    assert result == {
        "replaced": {"nvidia-utils-580": "580.173.02-1ubuntu1", "nvidia-modprobe": "580.126.09-1ubuntu1"},
        "lines": ["nvidia-utils-580 580.173.02-1ubuntu1 -> 580.178.04-1ubuntu1",
                  "linux-image-6.17.0-1026-nvidia 6.17.0-1026.26 (new)", "nvidia-modprobe 580.126.09-1ubuntu1 (removed)"]}


def test_set_changes_restore_what_moved_and_remove_what_came():
    changes = su.set_changes(dpkg(), dpkg("580.178.04", KERNELS[1], 3))
    assert changes["restore"]["nvidia-utils-580"] == "580.173.02-1ubuntu1"
    assert changes["restore"]["linux-image-6.17.0-1014-nvidia"] == "6.17.0-1014.14"   # gone in the second reading
    assert "nvidia-modprobe" not in changes["restore"]
    assert changes["remove"] == ["linux-headers-6.17.0-1026-nvidia", "linux-image-6.17.0-1026-nvidia",
                                 "linux-modules-6.17.0-1026-nvidia", "linux-modules-nvidia-580-open-6.17.0-1026-nvidia"]
    assert su.set_changes(dpkg(), dpkg(status="ii ")) == {"restore": {}, "remove": []}     # a hold is no version
    # the driver role's pass installs NVIDIA's pinning package where it is offered: the driver role's, not the move's
    pinned = dpkg() + "nvidia-driver-pinning-580\tii \t580-1\n"
    assert su.set_changes(dpkg(), pinned) == {"restore": {}, "remove": []}


MADISON = """nvidia-utils-580 | 580.178.04-1ubuntu1 | https://repo.download.nvidia.com/baseos/ubuntu/noble/arm64 noble/common arm64 Packages
 nvidia-utils-580 | 580.173.02-1ubuntu1 | https://repo.download.nvidia.com/baseos/ubuntu/noble/arm64 noble/common arm64 Packages
"""


def test_restore_sources_prefers_the_repositories_then_the_cache_and_names_what_is_missing():
    packages = {"nvidia-utils-580": "580.173.02-1ubuntu1", "libnvidia-compute-580": "580.173.02-1ubuntu1",
                "linux-image-nvidia-hwe-24.04": "1:6.17.0-1014.14", "nvidia-kernel-common-580": "580.173.02-1ubuntu1"}
    cached = ["/var/cache/apt/archives/libnvidia-compute-580_580.173.02-1ubuntu1_arm64.deb",
              "/var/cache/apt/archives/linux-image-nvidia-hwe-24.04_1%3a6.17.0-1014.14_arm64.deb",
              "/var/cache/apt/archives/nvidia-kernel-common-580_580.159.03-1ubuntu1_arm64.deb"]
    assert su.restore_sources(packages, MADISON, cached) == {
        "install": ["/var/cache/apt/archives/libnvidia-compute-580_580.173.02-1ubuntu1_arm64.deb",
                    "/var/cache/apt/archives/linux-image-nvidia-hwe-24.04_1%3a6.17.0-1014.14_arm64.deb",
                    "nvidia-utils-580=580.173.02-1ubuntu1"],
        "missing": ["nvidia-kernel-common-580=580.173.02-1ubuntu1"]}
    assert su.deb_file_name("linux-image-nvidia-hwe-24.04", "1:6.17.0-1014.14", "arm64") == \
        "linux-image-nvidia-hwe-24.04_1%3a6.17.0-1014.14_arm64.deb"


def test_the_filters_are_the_functions():
    filters = FilterModule().filters()
    assert filters["upgrade_target"].deferred == ("stack_upgrade", "upgrade_target")
    assert filters["restore_sources"].deferred == ("stack_upgrade", "restore_sources")
    assert filters["set_changes"].deferred == ("stack_upgrade", "set_changes")
    assert filters["simulated_changes"].deferred == ("stack_upgrade", "simulated_changes")
