# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver and CUDA toolkit as a node shows them (pure functions, no I/O).

What the roles driver and cuda read on a node, and the parsers here:

``dpkg-query -W -f='${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' 'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*' 'linux-image-*'``::

    libnvidia-common-580\\tii \\t580.173.02-1ubuntu1
    nvidia-driver-pinning-580\\tii \\t580-1
    nvidia-utils-580\\thi \\t580.173.02-1ubuntu1
    nvidia-modprobe\\tii \\t580.126.09-1ubuntu1
    nvidia-firmware-580-580.173.02\\tii \\t580.173.02-1ubuntu1
    linux-modules-nvidia-580-open-6.17.0-1014-nvidia\\thi \\t6.17.0-1014.14+3
    linux-modules-nvidia-580-open-nvidia-hwe-24.04\\tii \\t6.17.0-1014.14+3
    linux-image-nvidia-hwe-24.04\\tii \\t6.17.0-1014.14
    nvidia-driver-580-open\\tun \\t

``apt-cache show linux-modules-nvidia-580-open-6.17.0-1026-nvidia ...`` (stanzas; one per version)::

    Package: linux-modules-nvidia-580-open-6.17.0-1026-nvidia
    Version: 6.17.0-1026.26+3
    Depends: nvidia-kernel-common-580 (= 580.173.02-1ubuntu1), linux-image-6.17.0-1026-nvidia

``/proc/driver/nvidia/version``::

    NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  (dvs-builder@...)  <date>
    GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)

``nvcc --version``::

    nvcc: NVIDIA (R) Cuda compiler driver
    Copyright (c) 2005-2026 NVIDIA Corporation
    Built on Tue_Jun_09_02:43:40_PM_PDT_2026
    Cuda compilation tools, release 13.3, V13.3.73
    Build cuda_13.3.r13.3/compiler.38244171_0

``apt-get install --simulate ...``::

    Inst cuda-drivers (590.48.01-0ubuntu1 NVIDIA CUDA:localhost [amd64])
    Remv nvidia-driver-580-open [580.173.02-0ubuntu1]
    Conf cuda-drivers (590.48.01-0ubuntu1 NVIDIA CUDA:localhost [amd64])
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# A driver version: branch.minor[.patch] with a 3-digit branch (580.142, 580.173.02, 590.48.01).
DRIVER_VERSION_RE = re.compile(r"^(\d{3})\.(\d+)(?:\.(\d+))?$")
BRANCH_RE = re.compile(r"^\d{3}$")
_PROC_RE = re.compile(r"^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d{3}\.\d+(?:\.\d+)?)\s", re.M)
_NVCC_RE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")
_APT_SIM_RE = re.compile(r"^(Inst|Remv|Purg)\s+(\S+)(?:\s+\[([^\]]*)\])?(?:\s+\((\S+))?", re.M)


def upstream_version(version):
    """The upstream part of a Debian version: ``1:580.173.02-0ubuntu1`` -> ``580.173.02``."""
    text = (version or "").strip()
    if ":" in text:
        text = text.split(":", 1)[1]
    if "-" in text:
        text = text.rsplit("-", 1)[0]
    return text


def is_driver_version(text):
    """True for 580.142, 580.173.02, 590.48.01; False for 580-1, 1.17.8, 13.0.88."""
    return bool(DRIVER_VERSION_RE.match(text or ""))


def version_spec_kind(spec):
    """``exact`` for a full driver version (580.173.02), ``branch`` for a branch (580), else ``invalid``."""
    text = str(spec or "").strip()
    if BRANCH_RE.match(text):
        return "branch"
    if is_driver_version(text):
        return "exact"
    return "invalid"


def version_matches(version, spec):
    """Does the installed driver ``version`` satisfy ``spec`` (an exact version or a branch)?"""
    spec = str(spec).strip()
    if version_spec_kind(spec) == "branch":
        return (version or "").split(".")[0] == spec
    return version == spec


# Packages named like the driver whose versions are their own (never counted as the driver, never removed):
# nvidia-modprobe and nvidia-settings (a public GB10 project had to pin nvidia-modprobe apart), the GSP firmware
# (one package per version, the previous one stays until autoremove), the pinning packages, the container toolkit.
OWN_VERSION_RE = re.compile(r"^(nvidia-modprobe|nvidia-settings|nvidia-firmware-.*|nvidia-driver-pinning-.*"
                            r"|libnvidia-container.*|nvidia-container-.*)$")
# The precompiled kernel modules (Canonical's linux-restricted-modules): one package per kernel, one per flavour.
MODULES_RE = re.compile(r"^linux-modules-nvidia-(\d{3})-open-(.+)$")
KERNEL_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+-\d+-[a-z0-9][a-z0-9.-]*$")
DKMS_RE = re.compile(r"^nvidia-dkms(-\d{3})?-open$|^nvidia-dkms(-\d{3})?$")
_IMAGE_META_RE = re.compile(r"^linux-image-(?!\d+\.\d+\.\d+-)(.+)$")


def own_version(name):
    """True for nvidia-modprobe, nvidia-settings, nvidia-firmware-*, nvidia-driver-pinning-*, the container toolkit."""
    return bool(OWN_VERSION_RE.match(name or ""))


def parse_dpkg_query(text):
    """Parse the dpkg-query lines above; returns every package dpkg knows, installed or not::

        [{"package": "nvidia-utils-580", "status": "hi", "version": "580.173.02-0ubuntu1",
          "upstream": "580.173.02", "installed": True, "held": True}, ...]

    ``installed`` is false for packages removed (``rc``: config files left) or never installed (``un``).
    """
    packages = []
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip():
            continue
        name, status, version = parts[0].strip(), parts[1].strip(), parts[2].strip()
        current = status[1:2]
        packages.append({
            "package": name,
            "status": status,
            "version": version,
            "upstream": upstream_version(version),
            "installed": bool(version) and current not in ("n", "c", ""),
            "held": status[:1] == "h",
        })
    return packages


def driver_state(dpkg_text, wanted, pin_packages=None, kernel=""):
    """Classify a node's NVIDIA driver packages against the wanted version (exact or branch).

    The driver's version set is every installed package whose upstream version
    looks like a driver version, except those with versions of their own
    (``own_version``: nvidia-modprobe, the firmware and pinning packages) and
    the kernel module packages (linux-modules-nvidia-*, at kernel versions),
    which are reported apart. ``kernel`` is the running kernel's release
    (/proc/sys/kernel/osrelease). Returns::

        {"state": "ok" | "absent" | "other",
         "version": "580.173.02",            # the one installed driver version, "" if none or several
         "versions": {"580.173.02": ["libnvidia-common-580", ...]},
         "summary": "580.173.02 (libnvidia-common-580, ...)",
         "packages": {"libnvidia-common-580": "580.173.02", ...},   # the installed driver set
         "debs": {"libnvidia-common-580": "580.173.02-1ubuntu1", ...},
         "held": ["nvidia-utils-580"],                              # every held package dpkg shows
         "pins_missing": ["libnvidia-compute"],                     # pin names that are not installed
         "own_version": {"nvidia-modprobe": "580.126.09-1ubuntu1"},  # never counted, never removed
         "modules": {"linux-modules-nvidia-580-open-6.17.0-1014-nvidia": "6.17.0-1014.14+3", ...},
         "module_kernels": ["linux-modules-nvidia-580-open-6.17.0-1014-nvidia"],
         "module_metas": ["linux-modules-nvidia-580-open-nvidia-hwe-24.04"],
         "kernel_module": "linux-modules-nvidia-580-open-6.17.0-1014-nvidia",  # the running kernel's, "" if none
         "dkms": ["nvidia-dkms-580-open"],
         "layout": "precompiled" | "dkms" | "none",
         "kernel_flavours": ["nvidia-hwe-24.04"],                   # installed linux-image-<flavour> metapackages
         "kernels": ["6.17.0-1014-nvidia"]}                         # installed linux-image-<release> packages

    ``ok``: exactly one driver version is installed and it satisfies ``wanted``;
    ``absent``: no driver package is installed; ``other``: anything else
    (another version, another branch, or a partial upgrade with two versions).
    """
    packages = [p for p in parse_dpkg_query(dpkg_text) if p["installed"]]
    modules = [p for p in packages if MODULES_RE.match(p["package"])]
    drivers = [p for p in packages if is_driver_version(p["upstream"]) and not own_version(p["package"])
               and not MODULES_RE.match(p["package"]) and not p["package"].startswith("linux-")]
    versions = {}
    for pkg in drivers:
        versions.setdefault(pkg["upstream"], []).append(pkg["package"])
    for names in versions.values():
        names.sort()
    single = list(versions)[0] if len(versions) == 1 else ""
    if not versions:
        state = "absent"
    elif single and version_matches(single, wanted):
        state = "ok"
    else:
        state = "other"
    by_name = dict((p["package"], p) for p in packages)
    pins = list(pin_packages or [])
    kernels = sorted(p["package"] for p in modules if KERNEL_RELEASE_RE.match(MODULES_RE.match(p["package"]).group(2)))
    running = [n for n in kernels if kernel and MODULES_RE.match(n).group(2) == kernel]
    dkms = sorted(p["package"] for p in drivers if DKMS_RE.match(p["package"]))
    return {
        "state": state,
        "version": single,
        "versions": versions,
        "summary": ", ".join("%s (%s)" % (v, ", ".join(versions[v])) for v in sorted(versions)),
        "packages": dict((p["package"], p["upstream"]) for p in drivers),
        "debs": dict((p["package"], p["version"]) for p in drivers),
        "held": sorted(p["package"] for p in packages if p["held"]),
        "pins_missing": [n for n in pins if n not in by_name],
        "own_version": dict((p["package"], p["version"]) for p in packages if own_version(p["package"])),
        "modules": dict((p["package"], p["version"]) for p in modules),
        "module_kernels": kernels,
        "module_metas": sorted(p["package"] for p in modules if p["package"] not in kernels),
        "kernel_module": running[0] if running else "",
        "dkms": dkms,
        "layout": "precompiled" if modules else ("dkms" if dkms else "none"),
        "kernel_flavours": sorted(_IMAGE_META_RE.match(p["package"]).group(1) for p in packages
                                  if _IMAGE_META_RE.match(p["package"])),
        "kernel_flavour_versions": dict((_IMAGE_META_RE.match(p["package"]).group(1), p["version"]) for p in packages
                                        if _IMAGE_META_RE.match(p["package"])),
        "kernels": sorted(p["package"][len("linux-image-"):] for p in packages if p["package"].startswith("linux-image-")
                          and KERNEL_RELEASE_RE.match(p["package"][len("linux-image-"):])),
    }


def parse_apt_cache_show(text):
    """``apt-cache show`` stanzas -> ``[{"package", "version", "depends": [[alternative, ...], ...]}]``."""
    entries = []
    for block in (text or "").split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Version"):
            depends = [[alt.strip() for alt in group.split("|")]
                       for group in fields.get("Depends", "").split(",") if group.strip()]
            entries.append({"package": fields["Package"], "version": fields["Version"], "depends": depends})
    return entries


# One relation of a Depends group: ``name (op version)`` or a bare ``name``.
_RELATION_RE = re.compile(r"^\s*([^\s(]+)\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?\s*$")
_KERNEL_COMMON_RE = re.compile(r"^nvidia-kernel-common(?:-(\d{3}))?$")


def _order(char):
    """dpkg's character order: ``~`` before everything (even the end), letters before other characters."""
    if char == "~":
        return -1
    if not char or char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(a, b):
    """dpkg's verrevcmp (lib/dpkg/version.c): compare an upstream version or a revision."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(version):
    """``[epoch:]upstream[-revision]`` -> (epoch, upstream, revision); no revision is an empty one, as in dpkg."""
    text = str(version or "").strip()
    epoch = 0
    if ":" in text:
        head, text = text.split(":", 1)
        epoch = int(head) if head.isdigit() else 0
    upstream, revision = (text.rsplit("-", 1) if "-" in text else (text, ""))
    return epoch, upstream, revision


def compare_versions(a, b):
    """Debian version comparison as dpkg does it: negative, 0 or positive.

    ``compare_versions("580.142-0ubuntu0.24.04.1", "580.142-1") < 0``,
    ``compare_versions("580.142-1ubuntu1", "580.142-1") > 0``,
    ``compare_versions("6.17.0-1014.14+3", "6.17.0-1014.14+10") < 0``, ``1.0~rc1 < 1.0``.
    """
    ea, ua, ra = _split_version(a)
    eb, ub, rb = _split_version(b)
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def relation_holds(version, op, bound):
    """Does ``version`` satisfy the Debian relation ``op bound`` (``<<``, ``<=``, ``=``, ``>=``, ``>>``)?

    ``<`` and ``>`` are dpkg's obsolete spellings of ``<=`` and ``>=``.
    """
    cmp = compare_versions(version, bound)
    return {"<<": cmp < 0, "<=": cmp <= 0, "<": cmp <= 0, "=": cmp == 0,
            ">=": cmp >= 0, ">": cmp >= 0, ">>": cmp > 0}[op]


def _relations(entry):
    """The entry's single-alternative relations: ``[(name, op, version)]`` (op and version empty when unversioned).

    The two real forms of a precompiled module's tie to the driver are both read as relations on
    nvidia-kernel-common-<branch>: NVIDIA's DGX repository ``nvidia-kernel-common-580 (>= 580.142)``,
    Ubuntu's archive ``nvidia-kernel-common-580 (<= 580.142-1), nvidia-kernel-common-580 (>= 580.142)``.
    """
    found = []
    for group in entry["depends"]:
        if len(group) != 1:
            continue
        match = _RELATION_RE.match(group[0])
        if match:
            found.append((match.group(1), match.group(2) or "", match.group(3) or ""))
    return found


class _CmpKey(object):
    """Sort key ordering Debian versions as dpkg does."""

    def __init__(self, version):
        self.version = version

    def __lt__(self, other):
        return compare_versions(self.version, other.version) < 0

    def __eq__(self, other):
        return compare_versions(self.version, other.version) == 0


def sort_versions(versions):
    """Debian versions, oldest first, without duplicates."""
    return sorted(set(versions), key=_CmpKey)


def _driver_matches(version, wanted):
    """A Debian version of a driver package against ``wanted``: a branch (580), an upstream version
    (580.173.02: any revision of it) or a full Debian version (580.173.02-1ubuntu1: that one)."""
    wanted = str(wanted).strip()
    if "-" in wanted or ":" in wanted:
        return compare_versions(version, wanted) == 0
    return version_matches(upstream_version(version), wanted)


def kernel_common_versions(apt_show_text, wanted=""):
    """The versions of nvidia-kernel-common[-<branch>] the stanzas offer, oldest first, those satisfying
    ``wanted`` (a branch, an upstream version or a full Debian version; empty: all)."""
    found = []
    for entry in parse_apt_cache_show(apt_show_text):
        if _KERNEL_COMMON_RE.match(entry["package"]) and (not wanted or _driver_matches(entry["version"], wanted)):
            found.append(entry["version"])
    return sort_versions(found)


def module_builds(apt_show_text, wanted, offered=None):
    """The precompiled module builds that fit a driver: ``{package: [versions]}``, oldest first (newest last).

    ``wanted`` is the driver: a full Debian version of its nvidia-kernel-common
    (580.142-0ubuntu0.24.04.1, what dpkg shows installed), an upstream version
    (580.173.02: compared without a Debian revision) or a branch (580).
    ``offered`` are the Debian versions of nvidia-kernel-common-<branch> the
    repositories offer; by default the nvidia-kernel-common stanzas in
    ``apt_show_text``. For a branch, a build fits when it fits some offered
    version of the branch (without any such stanza: the version its own
    relations name).

    A per-kernel package (linux-modules-nvidia-580-open-6.17.0-1014-nvidia)
    fits a driver version when it has relations on nvidia-kernel-common[-<branch>]
    and every one admits that version (=, >=, <=, >>, <<, compared as dpkg
    compares versions). Real packages never say ``=`` there: NVIDIA's DGX
    repository writes ``(>= 580.142)``, Ubuntu's archive the pair
    ``(<= 580.142-1), (>= 580.142)``. A flavour metapackage
    (linux-modules-nvidia-580-open-nvidia-hwe-24.04) fits when its own
    kernel-common relations (if any) admit the same driver version and the
    per-kernel build it names with ``(= version)`` fits it. Packages of another
    branch than ``wanted``'s are left out.
    """
    wanted = str(wanted).strip()
    branch = upstream_version(wanted).split(".", 1)[0]
    entries = [e for e in parse_apt_cache_show(apt_show_text)
               if MODULES_RE.match(e["package"]) and MODULES_RE.match(e["package"]).group(1) == branch]
    if version_spec_kind(wanted) == "branch":
        pool = offered if offered is not None else kernel_common_versions(apt_show_text)
        candidates = [v for v in pool if _driver_matches(v, wanted)]
        if offered is None and not candidates:
            candidates = sort_versions(v for e in entries for n, op, v in _relations(e)
                                       if _KERNEL_COMMON_RE.match(n) and op in ("=", ">=", ">>")
                                       and _driver_matches(v, wanted))
    else:
        candidates = [wanted]

    def common_fits(entry, version):
        rels = [(op, bound) for n, op, bound in _relations(entry) if _KERNEL_COMMON_RE.match(n) and op]
        return rels, all(relation_holds(version, op, bound) for op, bound in rels)

    def per_kernel_name(name):
        return bool(KERNEL_RELEASE_RE.match(MODULES_RE.match(name).group(2)))

    fits = set()
    for version in candidates:
        kernels = set()
        for entry in entries:
            rels, ok = common_fits(entry, version)
            if per_kernel_name(entry["package"]) and rels and ok:
                kernels.add((entry["package"], entry["version"]))
        fits |= kernels
        for entry in entries:
            if per_kernel_name(entry["package"]):
                continue
            rels, ok = common_fits(entry, version)
            named = [(n, v) for n, op, v in _relations(entry) if op == "=" and MODULES_RE.match(n)]
            if ok and (named or rels) and all(pair in kernels for pair in named):
                fits.add((entry["package"], entry["version"]))
    builds = {}
    for name, version in fits:
        builds.setdefault(name, []).append(version)
    return dict((n, sort_versions(v)) for n, v in builds.items())


def driver_target(apt_show_text, wanted, kernel_package="", peers=None):
    """The nvidia-kernel-common version (a full Debian version) to install where the wanted driver is not, "" if none.

    The newest version the stanzas offer that satisfies ``wanted`` (a branch or
    an exact version); when ``peers`` (the upstream driver versions the other
    nodes run) agree on one, that one; with ``kernel_package`` (the running
    kernel's linux-modules-nvidia-<branch>-open-<kernel>, precompiled layout)
    only a version that package has a fitting build of.
    """
    offered = kernel_common_versions(apt_show_text, wanted)
    agreed = sorted(set(p for p in (peers or []) if p))
    if len(agreed) == 1:
        offered = [v for v in offered if upstream_version(v) == agreed[0]]
    if kernel_package:
        offered = [v for v in offered if module_builds(apt_show_text, v).get(kernel_package)]
    return offered[-1] if offered else ""


def proc_driver_version(text):
    """The loaded kernel module's version from /proc/driver/nvidia/version text, "" if none."""
    match = _PROC_RE.search(text or "")
    return match.group(1) if match else ""


def nvcc_release(text):
    """``nvcc --version`` -> ``{"release": "13.3", "version": "13.3.73"}`` (empty strings if not nvcc's)."""
    match = _NVCC_RE.search(text or "")
    if not match:
        return {"release": "", "version": ""}
    return {"release": match.group(1), "version": match.group(2)}


def apt_simulation(text):
    """What ``apt-get --simulate`` would do: ``[{"action": "Inst", "package": "cuda-drivers", "version": "590.48.01-0ubuntu1"}]``.

    ``version`` is the version to be installed for Inst, the installed one for Remv/Purg.
    """
    actions = []
    for match in _APT_SIM_RE.finditer(text or ""):
        action, name, current, new = match.group(1), match.group(2), match.group(3), match.group(4)
        version = new if action == "Inst" else (current or "")
        actions.append({"action": action, "package": name, "version": version or ""})
    return actions


# The kernel flavour's packages (Ubuntu's linux-nvidia-6.17 source and its meta and signed sources):
# per release linux-image-6.17.0-1014-nvidia, linux-modules-6.17.0-1014-nvidia, linux-headers-6.17.0-1014-nvidia,
# linux-tools-..., linux-buildinfo-..., linux-modules-nvidia-fs-... and the source-level
# linux-nvidia-6.17-headers-6.17.0-1014; the flavour metapackages linux-nvidia-hwe-24.04,
# linux-image-nvidia-hwe-24.04, linux-headers-nvidia-hwe-24.04, linux-tools-nvidia-hwe-24.04.
_FLAVOUR_SUFFIX_RE = re.compile(r"^(.+?)(?:-hwe)?-\d{2}\.\d{2}$")
_ABI_RE = re.compile(r"^(\d+\.\d+\.\d+-\d+)-(.+)$")


def _escape(text):
    """re.escape without the escaped hyphens (Python 3.7+ escapes "-"): the blacklist reads as a package name."""
    return re.escape(text).replace("\\-", "-")


def flavour_kernel_suffix(flavour):
    """The kernel release suffix of a flavour metapackage's flavour: nvidia-hwe-24.04 -> nvidia,
    nvidia-64k-hwe-24.04 -> nvidia-64k, generic-hwe-24.04 -> generic, nvidia -> nvidia."""
    match = _FLAVOUR_SUFFIX_RE.match(flavour or "")
    return match.group(1) if match else (flavour or "")


def kernel_set(dpkg_text, kernel=""):
    """The installed packages of the running kernel's flavour, the ones held with the driver.

    ``dpkg_text`` is dpkg-query's ``${Package}\\t${db:Status-Abbrev}\\t${Version}`` for ``linux-*``;
    ``kernel`` the running release (6.17.0-1014-nvidia). The flavour is every installed
    ``linux-image-<flavour>`` metapackage whose kernels end like the running one (nvidia-hwe-24.04 for
    ``-nvidia``), or, with none installed, the running kernel's suffix alone. Returns::

        {"flavours": ["nvidia-hwe-24.04"], "suffix": "nvidia",
         "releases": ["6.17.0-1014-nvidia"],               # installed linux-image-<release> of the flavour
         "packages": {"linux-image-nvidia-hwe-24.04": "6.17.0-1014.14",
                      "linux-modules-6.17.0-1014-nvidia": "6.17.0-1014.14", ...},
         "blacklist": ["linux-(.+-)?nvidia-hwe-24\\\\.04$", ...]}   # unattended-upgrades regular expressions

    The NVIDIA precompiled module packages (linux-modules-nvidia-<branch>-open-*) are the driver's, not in
    ``packages``; the blacklist covers them with the rest of the flavour. ``blacklist`` entries are Python
    regular expressions as unattended-upgrades matches them (``re.match``: anchored at the start of the
    package name, so each ends with ``$``): every flavour metapackage, every release of the flavour's suffix
    (also releases not installed yet) and the source-level headers and tools packages of its ABIs; never
    another flavour (``-nvidia-64k``), linux-firmware or linux-libc-dev.
    """
    packages = [p for p in parse_dpkg_query(dpkg_text) if p["installed"]]
    names = dict((p["package"], p["version"]) for p in packages)
    match = _ABI_RE.match(kernel or "")
    suffix = match.group(2) if match else ""
    flavours = []
    for name in names:
        meta = _IMAGE_META_RE.match(name)
        if meta and (not suffix or flavour_kernel_suffix(meta.group(1)) == suffix):
            flavours.append(meta.group(1))
    flavours.sort()
    if not suffix and flavours:
        suffix = flavour_kernel_suffix(flavours[0])
    releases = sorted(n[len("linux-image-"):] for n in names if n.startswith("linux-image-")
                      and _ABI_RE.match(n[len("linux-image-"):])
                      and _ABI_RE.match(n[len("linux-image-"):]).group(2) == suffix)
    abis = sorted(set(_ABI_RE.match(r).group(1) for r in releases))
    chosen = {}
    for name, version in names.items():
        if not name.startswith("linux-") or MODULES_RE.match(name):
            continue
        if any(name == "linux-" + f or name.endswith("-" + f) for f in flavours):
            chosen[name] = version
        elif any(name.endswith("-" + r) for r in releases):
            chosen[name] = version
        elif any(re.match(r"^linux-%s(-[0-9.]+)?-(headers|tools|cloud-tools)-%s$" % (re.escape(suffix), re.escape(a)), name)
                 for a in abis):
            chosen[name] = version
    blacklist = ["linux-(.+-)?%s$" % _escape(f) for f in flavours]
    if suffix:
        blacklist.append(r"linux-.+-[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-%s$" % _escape(suffix))
        blacklist.append(r"linux-%s(-[0-9.]+)?-(headers|tools|cloud-tools)-[0-9]+\.[0-9]+\.[0-9]+-[0-9]+$"
                         % _escape(suffix))
    return {"flavours": flavours, "suffix": suffix, "releases": releases, "packages": chosen,
            "blacklist": blacklist}


def kernel_offer(apt_show_text, flavour):
    """The newest version of ``linux-image-<flavour>`` the repositories offer and the kernel it installs.

    ``apt_show_text`` is ``apt-cache show linux-image-<flavour>`` (one stanza per version; the metapackage
    depends on its kernel with ``linux-image-<release> (= version)``). Returns
    ``{"version": "6.17.0-1026.26", "release": "6.17.0-1026-nvidia"}``, empty strings when none is offered.
    """
    best = None
    for entry in parse_apt_cache_show(apt_show_text):
        if entry["package"] != "linux-image-%s" % flavour:
            continue
        if best is None or compare_versions(entry["version"], best["version"]) > 0:
            best = entry
    if best is None:
        return {"version": "", "release": ""}
    release = ""
    for name, op, bound in _relations(best):
        rel = name[len("linux-image-"):] if name.startswith("linux-image-") else ""
        if rel and KERNEL_RELEASE_RE.match(rel):
            release = rel
            break
    return {"version": best["version"], "release": release}
