# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver and CUDA toolkit as a node shows them (pure functions, no I/O).

What the roles driver and cuda read on a node, and the parsers here:

``dpkg-query -W -f='${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' 'nvidia-*' 'libnvidia-*'``::

    libnvidia-common-580\\tii \\t580.173.02-0ubuntu1
    nvidia-driver-pinning-580\\tii \\t580-1
    nvidia-utils-580\\thi \\t580.173.02-0ubuntu1
    nvidia-driver-580-open\\tun \\t

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


def driver_state(dpkg_text, wanted, pin_packages=None):
    """Classify a node's NVIDIA driver packages against the wanted version (exact or branch).

    Only installed packages whose upstream version looks like a driver version
    count (so nvidia-driver-pinning-580 at 580-1 or libnvidia-container1 at
    1.17.8 do not). Returns::

        {"state": "ok" | "absent" | "other",
         "version": "580.173.02",            # the one installed driver version, "" if none or several
         "versions": {"580.173.02": ["libnvidia-common-580", ...]},
         "summary": "580.173.02 (libnvidia-common-580, ...)",
         "packages": {"libnvidia-common-580": "580.173.02", ...},   # installed driver packages
         "held": ["nvidia-utils-580"],
         "pins_missing": ["libnvidia-compute"]}   # pin names that are not installed

    ``ok``: exactly one driver version is installed and it satisfies ``wanted``;
    ``absent``: no driver package is installed; ``other``: anything else
    (another version, another branch, or a partial upgrade with two versions).
    """
    packages = [p for p in parse_dpkg_query(dpkg_text) if p["installed"]]
    drivers = [p for p in packages if is_driver_version(p["upstream"])]
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
    return {
        "state": state,
        "version": single,
        "versions": versions,
        "summary": ", ".join("%s (%s)" % (v, ", ".join(versions[v])) for v in sorted(versions)),
        "packages": dict((p["package"], p["upstream"]) for p in drivers),
        "held": sorted(p["package"] for p in packages if p["held"]),
        "pins_missing": [n for n in pins if n not in by_name],
    }


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
