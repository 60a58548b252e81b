"""The running kernel of a spark-sim node as the tools see it: release, build config, command line, KHO.

A container runs the docker host's kernel, so the sim keeps the node's own in its stand-in /proc
(``<proc_root>/sys/kernel/osrelease``, ``<proc_root>/cmdline``) and the real /boot of the node
(``/boot/config-<release>``, shipped by a real kernel package). What breaks with it:

Kernel 7.0 with Kexec HandOver (NVIDIA/NV-Kernels PRs #590/#591; MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-
DGX-Spark #259): the arm64 ``nvidia`` flavour ``7.0.0-1019-nvidia`` is built with ``CONFIG_KEXEC_HANDOVER=y``
and ``CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y``; KHO's scratch area (about 9.3 GiB) becomes ``MIGRATE_CMA``
pageblocks that long-term pins cannot use, and ``ibv_reg_mr`` fails with ENOMEM. ``kho=off`` on the
command line turns it off (kernel/liveupdate/kexec_handover.c: ``early_param("kho", ...)`` through
``kstrtobool``, the last ``kho=`` wins). The fault ``kernel-7-kho`` (sim/spark-sim) makes the node run
that kernel (state ``kernel.running_override``); the boot loader's command line comes from
/etc/default/grub at every boot (``boot_cmdline``), so ``kho=off`` there takes effect at the next reboot,
as on a real node after update-grub. The fault ``kernel-update-kho`` (state ``kernel.kho_releases``) gives
a kernel of the flavour's own update (6.17.0-1026-nvidia) the same build options: booted, it fails the same way.
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import gpu

KHO_KERNEL = "7.0.0-1019-nvidia"        # NV-Kernels #590: Linux 7.0.0-1019.19~24.04.2; MiaAI-Lab #259: 7.0.0-1019-nvidia
KHO_CONFIG = ("# spark-sim: the build options of the arm64 nvidia 7.0 kernel that matter here (NV-Kernels #590)\n"
              "CONFIG_KEXEC_HANDOVER=y\n"
              "CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y\n")
SIM_MARK = "# spark-sim:"
GRUB_DEFAULT_FILE = "/etc/default/grub"
STOCK_CMDLINE = "quiet splash"          # Ubuntu's GRUB_CMDLINE_LINUX_DEFAULT


def boot_dir() -> str:
    return os.environ.get("SPARK_SIM_BOOT_DIR", "/boot")


def running_release(state: dict[str, Any]) -> str:
    kernel = state.get("kernel") or {}
    return str(kernel.get("running_override") or kernel.get("release") or gpu.DEFAULT_KERNEL)


def _grub_value(text: str, name: str) -> str:
    value = ""
    for line in text.splitlines():
        match = re.match(r"^\s*%s=(.*)$" % name, line)
        if match:
            value = match.group(1).strip().strip("'\"")
    return value


def boot_cmdline(release: str, grub_default: str = GRUB_DEFAULT_FILE) -> str:
    """/proc/cmdline as GRUB boots the kernel: grub-mkconfig's 10_linux puts
    ``${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}`` after ``root=... ro``."""
    try:
        with open(grub_default, encoding="utf-8") as handle:
            text = handle.read()
        linux, default = _grub_value(text, "GRUB_CMDLINE_LINUX"), _grub_value(text, "GRUB_CMDLINE_LINUX_DEFAULT")
    except OSError:
        linux, default = "", STOCK_CMDLINE
    args = " ".join(part for part in (linux, default) if part)
    return ("BOOT_IMAGE=/boot/vmlinuz-%s root=LABEL=spark-sim ro %s" % (release, args)).strip()


def write_cmdline(state: dict[str, Any], root: str | None = None) -> str:
    line = boot_cmdline(running_release(state))
    path = os.path.join(root or gpu.proc_root(state), "cmdline")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(line + "\n")
    return line


def write_running(state: dict[str, Any], root: str | None = None) -> None:
    """osrelease of the running kernel; /boot/config-<release> of the fault's kernel (a package would ship it);
    a config the sim wrote for a kernel no longer running is removed."""
    release = running_release(state)
    gpu.write_osrelease(release, root, state)
    boot = boot_dir()
    try:
        names = os.listdir(boot)
    except OSError:
        names = []
    for name in names:
        path = os.path.join(boot, name)
        if name.startswith("config-") and name != "config-" + release:
            try:
                with open(path, encoding="utf-8") as handle:
                    mine = handle.readline().startswith(SIM_MARK)
            except OSError:
                mine = False
            if mine:
                os.unlink(path)
    kernel = state.get("kernel") or {}
    if kernel.get("running_override") or release in (kernel.get("kho_releases") or []):
        os.makedirs(boot, exist_ok=True)
        with open(os.path.join(boot, "config-" + release), "w", encoding="utf-8") as handle:
            handle.write(KHO_CONFIG)


def _kstrtobool(value: str) -> bool | None:
    """lib/kstrtox.c kstrtobool."""
    if not value:
        return None
    if value[0] in "yYtT1":
        return True
    if value[0] in "nNfF0":
        return False
    if value[0] in "oO" and len(value) > 1:
        return True if value[1] in "nN" else False if value[1] in "fF" else None
    return None


def kho_active(proc: str, boot: str | None = None) -> bool:
    """Whether the running kernel has KHO on: what makes ibv_reg_mr fail on the 7.0 nvidia kernel."""
    try:
        with open(os.path.join(proc, "sys", "kernel", "osrelease"), encoding="utf-8") as handle:
            release = handle.read().strip()
        with open(os.path.join(boot or boot_dir(), "config-" + release), encoding="utf-8") as handle:
            config = handle.read()
    except OSError:
        return False
    if not re.search(r"(?m)^CONFIG_KEXEC_HANDOVER=y$", config):
        return False
    enabled = bool(re.search(r"(?m)^CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y$", config))
    try:
        with open(os.path.join(proc, "cmdline"), encoding="utf-8") as handle:
            tokens = handle.read().split()
    except OSError:
        tokens = []
    for token in tokens:
        if token.startswith("kho="):
            parsed = _kstrtobool(token[4:])
            if parsed is not None:
                enabled = parsed
    return enabled
