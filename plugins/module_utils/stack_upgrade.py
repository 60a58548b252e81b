# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What upgrade.yml moves a node to, and how it gets the node back (pure functions, no I/O).

The held set of a node is its NVIDIA driver (the version set, the precompiled module builds or
nvidia-dkms) and its running kernel flavour (nvidia_stack.driver_state and kernel_set read both from
one dpkg-query). ``upgrade_target`` picks the set a node moves to as one apt transaction: the newest
kernel the flavour offers (or the running one) and the driver release asked for (an exact
``driver_version``) or the newest release of the branch with a module build for that kernel.
``restore_sources`` says where each package of the set a node leaves comes back from when its checks
fail: the repositories (``apt-cache madison``) or apt's cache of downloaded archives; what is in
neither cannot be restored, and upgrade.yml stops before any change (upgrade_rollback).

``apt-cache madison NAME...`` (one line per offered version, the installed-only version is not listed)::

    nvidia-utils-580 | 580.178.04-1ubuntu1 | file:/var/lib/spark-sim/apt ./ Packages

Files of apt's cache (/var/cache/apt/archives): ``<name>_<version>_<arch>.deb``, an epoch's colon
written ``%3a`` (apt's URI quoting of the version).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.nvidia_stack import (
    compare_versions,
    driver_state,
    driver_target,
    kernel_offer,
    kernel_set,
    module_builds,
    upstream_version,
    version_spec_kind,
)

_MADISON_RE = re.compile(r"^\s*(\S+)\s*\|\s*(\S+)\s*\|")
_DEB_RE = re.compile(r"^([^_/]+)_([^_/]+)_([^_/]+)\.deb$")


def _module_prefix(branch):
    return "linux-modules-nvidia-%s-open-" % branch


def upgrade_target(dpkg_text, apt_show_text, kernel, wanted, move_kernel=True):
    """The set a node moves to, as one ``apt-get install`` list.

    ``dpkg_text`` is the driver role's dpkg-query (nvidia-*, libnvidia-*, linux-*); ``apt_show_text``
    (one text, or a list of texts read apart) ``apt-cache show`` of the flavour's image metapackage, nvidia-kernel-common-<branch> and the module
    packages of the kernels involved; ``kernel`` the running release; ``wanted`` the driver_version
    (a branch: the newest release with a build for the target kernel; an exact version: that one).
    Returns::

        {"moves": True, "problem": "",
         "kernel": {"from": "6.17.0-1014-nvidia", "to": "6.17.0-1026-nvidia", "version": "6.17.0-1026.26"},
         "driver": {"from": "580.173.02", "to": "580.178.04", "deb": "580.178.04-1ubuntu1"},
         "install": ["nvidia-driver-580-open=580.178.04-1ubuntu1", ...,
                     "linux-modules-nvidia-580-open-6.17.0-1026-nvidia=6.17.0-1026.26+4",
                     "linux-image-nvidia-hwe-24.04=6.17.0-1026.26", ...],
         "summary": "kernel 6.17.0-1014-nvidia -> 6.17.0-1026-nvidia, NVIDIA driver 580.173.02 -> 580.178.04"}

    ``problem`` (nothing moves) names what is missing: no driver installed, no flavour, an exact
    version the repositories do not offer, no build of the driver for the kernel.
    """
    if isinstance(apt_show_text, (list, tuple)):
        apt_show_text = "\n\n".join(str(text or "") for text in apt_show_text)
    wanted = str(wanted or "").strip()
    state = driver_state(dpkg_text, wanted, kernel=kernel)
    kset = kernel_set(dpkg_text, kernel)
    result = {"moves": False, "problem": "", "install": [], "summary": "",
              "kernel": {"from": kernel, "to": kernel, "version": ""},
              "driver": {"from": state["version"], "to": state["version"], "deb": ""}}
    if not state["version"]:
        result["problem"] = ("no single NVIDIA driver is installed (%s): site.yml installs one first"
                             % (state["summary"] or "none"))
        return result
    branch = upstream_version(wanted or state["version"]).split(".", 1)[0]
    flavour = kset["flavours"][0] if kset["flavours"] else ""
    offer = kernel_offer(apt_show_text, flavour) if flavour and move_kernel else {"version": "", "release": ""}
    target_kernel = kernel
    if offer["release"] and offer["release"] != kernel and offer["release"] not in kset["releases"]:
        running_version = kset["packages"].get("linux-image-%s" % flavour, "")
        if not running_version or compare_versions(offer["version"], running_version) > 0:
            target_kernel = offer["release"]
    module = _module_prefix(branch) + target_kernel
    precompiled = state["layout"] == "precompiled"
    spec = wanted if version_spec_kind(wanted) != "branch" else branch
    deb = driver_target(apt_show_text, spec, kernel_package=module if precompiled else "")
    if not deb:
        result["problem"] = (
            "the repositories offer no NVIDIA driver %s%s" % (
                spec, (" with a module build for kernel %s (%s)" % (target_kernel, module)) if precompiled else ""))
        return result
    target = upstream_version(deb)
    result["kernel"].update({"to": target_kernel, "version": offer["version"] if target_kernel != kernel else ""})
    result["driver"].update({"to": target, "deb": deb})
    if target == state["version"] and target_kernel == kernel:
        result["summary"] = "kernel %s and NVIDIA driver %s: nothing newer to move to" % (kernel, target)
        return result
    install = ["%s=%s" % (name, deb) for name in sorted(state["debs"])]
    if precompiled:
        builds = module_builds(apt_show_text, deb)
        install.append("%s=%s" % (module, builds[module][-1]))
        meta = _module_prefix(branch) + flavour
        if flavour and meta in state["modules"]:
            kernel_version = offer["version"] if target_kernel != kernel else kset["packages"].get(
                "linux-image-%s" % flavour, "")
            fitting = [v for v in builds.get(meta, []) if v.split("+", 1)[0] == kernel_version]
            if not fitting:
                result["problem"] = ("the repositories offer no %s build of NVIDIA driver %s for kernel %s"
                                     % (meta, target, target_kernel))
                return result
            install.append("%s=%s" % (meta, fitting[-1]))
        for name in state["module_kernels"]:
            if name != module and builds.get(name):
                install.append("%s=%s" % (name, builds[name][-1]))
    if target_kernel != kernel:
        install += ["%s=%s" % (name, offer["version"]) for name in sorted(kset["packages"])
                    if name.endswith("-" + flavour)]
    parts = []
    if target_kernel != kernel:
        parts.append("kernel %s -> %s" % (kernel, target_kernel))
    parts.append("NVIDIA driver %s -> %s" % (state["version"], target) if target != state["version"]
                 else "NVIDIA driver %s (a build for the new kernel)" % target)
    result.update({"moves": True, "install": install, "summary": ", ".join(parts)})
    return result


def installed_versions(dpkg_text):
    """``{package: version}`` of what the dpkg-query lines show installed (ii, hi, iU ...)."""
    found = {}
    for line in (dpkg_text or "").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0].strip() and parts[2].strip() and parts[1][1:2] not in ("n", "c", ""):
            found[parts[0].strip()] = parts[2].strip()
    return found


# NVIDIA's branch pinning package: the driver role installs it where the repositories offer it and never removes it
# (nvidia_stack.own_version), so its pass after a move or a rollback may add it; it is no part of the moved set.
_PINNING_RE = re.compile(r"^nvidia-driver-pinning-")


def set_changes(before_dpkg, after_dpkg):
    """What a move changed: ``{"restore": {package: version before}, "remove": [packages new since]}``.

    NVIDIA's pinning package (nvidia-driver-pinning-*) is left out: the driver role's own, not the move's.
    """
    before, after = installed_versions(before_dpkg), installed_versions(after_dpkg)
    return {"restore": dict((n, v) for n, v in before.items() if after.get(n) != v and not _PINNING_RE.match(n)),
            "remove": sorted(n for n in after if n not in before and not _PINNING_RE.match(n))}


def simulated_changes(simulation_text, before_dpkg):
    """What an ``apt-get --simulate install`` (``LC_ALL=C``) would do to the node::

        {"replaced": {"nvidia-utils-580": "580.173.02-1ubuntu1", ...},   # installed packages it replaces or removes
         "lines": ["nvidia-utils-580 580.173.02-1ubuntu1 -> 580.178.04-1ubuntu1",
                   "linux-image-6.17.0-1026-nvidia 6.17.0-1026.26 (new)", "foo 1.0 (removed)"]}

    ``replaced`` holds their installed versions: what a rollback would have to put back.
    """
    before = installed_versions(before_dpkg)
    replaced, lines = {}, []
    for match in re.finditer(r"^(Inst|Remv|Purg)\s+(\S+)(?:\s+\[([^\]]*)\])?(?:\s+\((\S+))?", simulation_text or "", re.M):
        action, name, new = match.group(1), match.group(2), match.group(4) or ""
        if name in before:
            replaced[name] = before[name]
        if action == "Inst":
            lines.append("%s %s -> %s" % (name, before[name], new) if name in before else "%s %s (new)" % (name, new))
        else:
            lines.append("%s %s (removed)" % (name, before.get(name, match.group(3) or "")))
    return {"replaced": replaced, "lines": lines}


def deb_file_name(name, version, arch):
    """The file name apt gives a downloaded archive: ``name_version_arch.deb``, ``:`` as ``%3a``."""
    return "%s_%s_%s.deb" % (name, version.replace(":", "%3a"), arch)


def restore_sources(packages, madison_text, cached_files):
    """Where each ``{package: version}`` comes back from: ``{"install": [...], "missing": [...]}``.

    ``install`` holds ``name=version`` for a version the repositories still offer, else the path of its
    archive in ``cached_files`` (paths of apt's cache); ``missing`` ``name=version`` for one in neither.
    """
    offered = set()
    for line in (madison_text or "").splitlines():
        match = _MADISON_RE.match(line)
        if match:
            offered.add((match.group(1), match.group(2)))
    cached = {}
    for path in cached_files or []:
        match = _DEB_RE.match(str(path).rsplit("/", 1)[-1])
        if match:
            cached[(match.group(1), match.group(2).replace("%3a", ":").replace("%3A", ":"))] = str(path)
    install, missing = [], []
    for name in sorted(packages):
        version = packages[name]
        if (name, version) in offered:
            install.append("%s=%s" % (name, version))
        elif (name, version) in cached:
            install.append(cached[(name, version)])
        else:
            missing.append("%s=%s" % (name, version))
    return {"install": install, "missing": missing}
