"""The GB10 GPU of a spark-sim node and the ``nvidia-smi`` stand-in that shows it.

The state lives under the ``"gpu"`` key of the node's state file (see state.py
for every field). This module builds that state (``default_gpu``), applies what
a reboot does to it (``apply_boot``), renders the outputs of nvidia-smi 580.x
from it, byte for byte where a real GB10 capture exists, and carries the
command-line front end (``main``) that sim/node/usr/bin/nvidia-smi calls.

Forms the stand-in answers (all output on stdout, as nvidia-smi does)::

    nvidia-smi                                  summary table             exit 0
    nvidia-smi -L                               GPU 0: NVIDIA GB10 (UUID: GPU-...)
    nvidia-smi --query-gpu=a,b --format=csv[,noheader][,nounits]
    nvidia-smi -q [-d CLOCK[,PERFORMANCE,...]]  the NVSMI LOG
    nvidia-smi -lgc MIN,MAX | -lgc MHZ          lock the graphics clock   (root)
    nvidia-smi -rgc                             reset the lock            (root)
    nvidia-smi -pm 0|1                          persistence mode          (root)
    nvidia-smi -pl WATTS                        refused: GB10 has no power limit
    nvidia-smi --version | -h
    any of them with -i 0 | -i 0000000F:01:00.0 | -i GPU-<uuid>

Exit codes follow nvidia-smi(1): 0 success, 2 invalid argument or flag, 3 not
available on the target device, 4 insufficient permission, 6 object not found,
9 driver not loaded, 18 driver/library version mismatch (NVML_ERROR_LIB_RM_VERSION_MISMATCH),
255 other error or internal driver error.

Faults (the state's ``"faults"`` key; ``sim/spark-sim fault HOST NAME`` sets them,
``... fault HOST clear`` clears them; see ``LGC_FAULTS``): ``lgc_fails`` makes every
``-lgc`` fail with an NVML error (exit 255), ``lgc_unsupported`` makes it print the
"not supported ... Treating as warning" lines and exit 0 without a lock, as the real
one does on GPUs that cannot lock their clocks. Every other form keeps answering.

The driver packages of the sim's NVIDIA repo (sim/apt-repo) record the
installed userspace version in /var/lib/spark-sim/driver-userspace-version;
the loaded kernel module (``driver_version``, shown in the stand-in
/proc/driver/nvidia/version under /var/lib/spark-sim/proc) follows it only at
the next boot (``apply_driver_install``). While they differ every form but -h
fails as the real one does after an upgrade without a reboot.

Environment: SPARK_SIM_STATE (state file), SPARK_SIM_NOW (pins the clock the
date line and the -q Timestamp show: ``2025-10-03T23:16:52``, ``2025-10-03
23:16:52.125`` or epoch seconds), SPARK_SIM_EUID (pretend to run with this
effective uid; ``1000`` makes -lgc/-rgc/-pm fail as for a non-root user).
"""

from __future__ import annotations

import datetime
import os
import sys
import uuid as uuidlib
from typing import Any, Callable, TextIO

from . import state as statefile

# --------------------------------------------------------------------------- constants

GB10_NAME = "NVIDIA GB10"
GB10_BUS_ID = "0000000F:01:00.0"
DEFAULT_DRIVER_VERSION = "580.173.02"
DEFAULT_CUDA_VERSION = "13.0"

EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NOT_AVAILABLE = 3
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_LIB_RM_VERSION_MISMATCH = 18
EXIT_OTHER_ERROR = 255

MSG_INVALID_COMBINATION = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
MSG_TERMINATING = "Terminating early due to previous errors."
MSG_DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
MSG_NO_DEVICES = "No devices were found"
MSG_VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"

USERSPACE_VERSION_FILE = "/var/lib/spark-sim/driver-userspace-version"  # written by libnvidia-compute-* postinst
DEFAULT_PROC_ROOT = "/var/lib/spark-sim/proc"                          # the stand-in /proc (driver/nvidia/version)

# Clock event reason bits (nvml.h nvmlClocksEventReason*), in the order -q prints them.
EVENT_REASONS: list[tuple[str, int, str, int]] = [
    # (csv name, bit, -q label, -q indent level)
    ("gpu_idle", 0x001, "Idle", 2),
    ("applications_clocks_setting", 0x002, "Applications Clocks Setting", 2),
    ("sw_power_cap", 0x004, "SW Power Cap", 2),
    ("hw_slowdown", 0x008, "HW Slowdown", 2),
    ("hw_thermal_slowdown", 0x040, "HW Thermal Slowdown", 3),
    ("hw_power_brake_slowdown", 0x080, "HW Power Brake Slowdown", 3),
    ("sync_boost", 0x010, "Sync Boost", 2),
    ("sw_thermal_slowdown", 0x020, "SW Thermal Slowdown", 2),
    ("display_clock_setting", 0x100, "Display Clock Setting", 2),
]
EVENT_REASONS_SUPPORTED = 0x1FF

# "Clocks Event Reasons Counters" rows: (-q label, state key).
EVENT_COUNTERS: list[tuple[str, str]] = [
    ("SW Power Capping", "sw_power_capping"),
    ("Sync Boost", "sync_boost"),
    ("SW Thermal Slowdown", "sw_thermal_slowdown"),
    ("HW Thermal Slowdown", "hw_thermal_slowdown"),
    ("HW Power Braking", "hw_power_braking"),
]

_WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


# --------------------------------------------------------------------------- state


def gpu_uuid(hostname: str) -> str:
    """A stable GPU UUID for a node: ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``."""
    return "GPU-%s" % uuidlib.uuid5(uuidlib.NAMESPACE_DNS, "spark-sim-gpu.%s" % hostname)


def default_gpu(hostname: str) -> dict[str, Any]:
    """The GB10 of a freshly created sim node (headless, idle, persistence on, no lock).

    Values and where they come from (field reports of DGX Spark / GB10 nodes):
    clock range 300..3003 MHz and ``-lgc 300,3003`` as the full range, max SM
    3003 MHz, (default) applications clock 2418 MHz, idle SM ~2405 MHz on
    580.173.02 (which does not down-clock at idle), video clock 2073 MHz,
    PCIe gen 1 x1 (NVLink-C2C reported as PCIe), ~11 W idle, compute
    capability 12.1. The VBIOS string is one seen in a third-party fixture.
    """
    return {
        "name": GB10_NAME,
        "index": 0,
        "bus_id": GB10_BUS_ID,
        "uuid": gpu_uuid(hostname),
        "vbios_version": "9A.0B.25.00.00",
        "driver_version": DEFAULT_DRIVER_VERSION,
        "cuda_version": DEFAULT_CUDA_VERSION,
        "compute_cap": "12.1",
        "driver_loaded": True,
        "persistence_mode": True,
        "persistence_at_boot": True,
        "display_active": False,
        "performance_state": "P0",
        "temperature_c": 40,
        "power_draw_w": 11.0,
        "utilization_pct": 0,
        "compute_mode": "Default",
        "clock_sm_mhz": 2405,
        "clock_video_mhz": 2073,
        "clock_min_mhz": 300,
        "clock_max_mhz": 3003,
        "clock_max_video_mhz": 2073,
        "clock_app_mhz": 2418,
        "clock_default_app_mhz": 2418,
        "lock_landing_offset_mhz": 20,
        "locked_clocks": None,
        "event_reasons_active": 0,
        "event_counters_us": {key: 0 for _label, key in EVENT_COUNTERS},
        "processes": [],
    }


def apply_boot(state: dict[str, Any]) -> list[str]:
    """What a reboot does to the GPU; returns one human-readable line per change.

    A reboot drops the ``nvidia-smi -lgc`` lock (the driver keeps it only in
    memory), ends the compute processes (graphics ones come back with the
    desktop) and leaves persistence mode as nvidia-persistenced sets it
    (``persistence_at_boot``), e.g.::

        ["gpu: locked clocks 0,2100 MHz dropped (nvidia-smi -lgc does not survive a reboot)"]
    """
    gpu = state.get("gpu")
    if not isinstance(gpu, dict):
        return []
    lines: list[str] = []
    lock = gpu.get("locked_clocks")
    if lock:
        lines.append(
            "gpu: locked clocks %s,%s MHz dropped (nvidia-smi -lgc does not survive a reboot)"
            % (lock.get("min_mhz"), lock.get("max_mhz"))
        )
    gpu["locked_clocks"] = None
    processes = gpu.get("processes") or []
    kept = [proc for proc in processes if "C" not in str(proc.get("type", "C"))]
    if len(kept) != len(processes):
        lines.append("gpu: %d compute process(es) ended by the reboot" % (len(processes) - len(kept)))
    gpu["processes"] = kept
    at_boot = bool(gpu.get("persistence_at_boot", True))
    if bool(gpu.get("persistence_mode", True)) != at_boot:
        lines.append("gpu: persistence mode %s at boot" % ("enabled" if at_boot else "disabled"))
    gpu["persistence_mode"] = at_boot
    return lines


def installed_userspace_version(path: str | None = None) -> str | None:
    """The userspace driver the packages installed (SPARK_SIM_DRIVER_USERSPACE overrides the file), None if none."""
    target = path or os.environ.get("SPARK_SIM_DRIVER_USERSPACE", USERSPACE_VERSION_FILE)
    try:
        with open(target, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def proc_root(state: dict[str, Any] | None = None) -> str:
    """SPARK_SIM_PROC, else the state's proc_root, else /var/lib/spark-sim/proc."""
    return os.environ.get("SPARK_SIM_PROC") or (state or {}).get("proc_root") or DEFAULT_PROC_ROOT


def proc_version_text(driver_version: str) -> str:
    """/proc/driver/nvidia/version of the open kernel module on a GB10 (aarch64)::

        NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  (dvs-builder@...)  <date>
        GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)
    """
    return ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  %s  Release Build  "
            "(dvs-builder@U22-I3-AE18-23-3)  Thu Jun 18 08:51:36 UTC 2026\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n" % driver_version)


def write_proc(state: dict[str, Any], root: str | None = None) -> None:
    """(Re)write the stand-in /proc/driver/nvidia/version from the loaded driver; none when not loaded."""
    gpu = state.get("gpu")
    path = os.path.join(root or proc_root(state), "driver", "nvidia", "version")
    if not isinstance(gpu, dict) or not gpu.get("driver_loaded", True):
        if os.path.exists(path):
            os.unlink(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(proc_version_text(str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))))


DEFAULT_KERNEL = "6.17.0-1014-nvidia"   # what a stock DGX OS 7 Spark runs (a public probe: 6.17.0-1014-nvidia)
# Where the kernel finds the NVIDIA module: Canonical's precompiled package, then a DKMS build.
MODULE_PATHS = ("kernel/nvidia-580-open/nvidia.ko", "updates/dkms/nvidia.ko")


def installed_kernels(root: str = "/") -> list[str]:
    """Kernel releases with an image in /boot (vmlinuz-<release>), oldest first."""
    boot = os.path.join(root, "boot")
    try:
        names = os.listdir(boot)
    except OSError:
        return []
    releases = [n[len("vmlinuz-"):] for n in names if n.startswith("vmlinuz-")]
    return sorted(releases, key=lambda r: [int(x) if x.isdigit() else 0 for x in r.replace("-", ".").split(".")])


def module_version(kernel: str, root: str = "/") -> tuple[str | None, str]:
    """The NVIDIA module the kernel loads: (version, path) from /lib/modules/<kernel>/..., (None, "") if none."""
    for rel in MODULE_PATHS:
        path = os.path.join(root, "lib", "modules", kernel, rel)
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("version="):
                        return line.split("=", 1)[1].strip(), "/lib/modules/%s/%s" % (kernel, rel)
        except OSError:
            continue
    return None, ""


def write_osrelease(kernel: str, root: str | None = None, state: dict[str, Any] | None = None) -> None:
    """The stand-in /proc/sys/kernel/osrelease (the container's own shows the docker host's kernel)."""
    path = os.path.join(root or proc_root(state), "sys", "kernel", "osrelease")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(kernel + "\n")


def apply_driver_install(state: dict[str, Any], userspace_file: str | None = None,
                         root: str | None = None, fs_root: str | None = None) -> list[str]:
    """At power-on the newest installed kernel boots (GRUB_DEFAULT=0) and loads the NVIDIA module it has; returns what changed.

    The module is the one under /lib/modules/<kernel>/ (kernel/nvidia-580-open/nvidia.ko from
    linux-modules-nvidia-580-open-<kernel>, or updates/dkms/nvidia.ko built by DKMS); its version
    is the loaded driver. A kernel without one loads no driver: nvidia-smi fails as without a driver
    (the orphaned-module failure after a kernel update). A node whose /boot has no kernel
    image keeps its kernel and follows the installed userspace version (no kernel packaging
    modelled). Called by boot.apply_power_on at every reboot and by spark-sim when it
    creates a node (after installing what the node ships with)::

        ["kernel: 6.17.0-1026-nvidia (was 6.17.0-1014-nvidia)",
         "gpu: NVIDIA kernel module 580.173.02 loaded (was 580.159.03)"]
    """
    gpu = state.get("gpu")
    if not isinstance(gpu, dict):
        return []
    lines: list[str] = []
    fs = fs_root or os.environ.get("SPARK_SIM_FS_ROOT", "/")
    kernels = installed_kernels(fs)
    kernel_state = state.setdefault("kernel", {"release": DEFAULT_KERNEL})
    before_kernel = kernel_state.get("release", DEFAULT_KERNEL)
    if kernels:
        kernel_state["release"] = kernels[-1]
        if kernels[-1] != before_kernel:
            lines.append("kernel: %s (was %s)" % (kernels[-1], before_kernel))
        installed, where = module_version(kernels[-1], fs)
    else:
        installed, where = installed_userspace_version(userspace_file), ""
    before = str(gpu.get("driver_version")) if gpu.get("driver_loaded", True) else None
    if installed is None:
        if before is not None:
            lines.append("gpu: no NVIDIA kernel module for %s: none loaded (was %s)" % (kernel_state["release"], before))
        gpu["driver_loaded"] = False
    else:
        if before != installed:
            lines.append("gpu: NVIDIA kernel module %s loaded%s (was %s)" % (installed, " from " + where if where else "",
                                                                            before or "none"))
        gpu["driver_version"] = installed
        gpu["driver_loaded"] = True
    kernel_state["module"] = where
    write_proc(state, root)
    write_osrelease(kernel_state["release"], root, state)
    return lines


def current_sm_clock(gpu: dict[str, Any]) -> int:
    """The SM (= graphics) clock the GPU reports now, in MHz.

    Unlocked: ``clock_sm_mhz``. Locked to MIN,MAX: the unlocked clock clamped
    into the lock, where a ceiling below the unlocked clock lands
    ``lock_landing_offset_mhz`` under it (field: asking 0,2100 reads ~2080).
    """
    stock = int(gpu.get("clock_sm_mhz", 2405))
    lock = gpu.get("locked_clocks")
    if not lock:
        return stock
    low = int(lock.get("min_mhz", 0))
    high = int(lock.get("max_mhz", stock))
    if high < stock:
        high = max(high - int(gpu.get("lock_landing_offset_mhz", 20)), 0)
    return min(max(stock, low), high)


def nvml_version(driver_version: str) -> str:
    """NVML's version string: the first two parts of the driver's (580.95.05 -> 580.95)."""
    return ".".join(driver_version.split(".")[:2])


def _version_tuple(driver_version: str) -> tuple[int, ...]:
    parts = []
    for part in driver_version.split("."):
        try:
            parts.append(int(part))
        except ValueError:
            parts.append(0)
    return tuple(parts)


def query_key_width(driver_version: str) -> int:
    """Where ``-q`` puts its ': ' separator: column 55 from 580.126 on, 42 before.

    Seen narrow (42) on 580.95.05 and 580.105.08, wide (55) on 580.126.09,
    580.142, 580.159.03 and 580.173.02; the cut between those is a guess.
    """
    return 55 if _version_tuple(driver_version) >= (580, 126) else 42


# --------------------------------------------------------------------------- time


def parse_now(value: str | None) -> datetime.datetime:
    """The time to show: SPARK_SIM_NOW's value if set, else the local time now.

    Accepts ISO 8601 (``2025-10-03T23:16:52``, ``2025-10-03 23:16:52.125``)
    shown as written, or epoch seconds shown in local time.
    """
    if not value:
        return datetime.datetime.now()
    text = value.strip()
    try:
        return datetime.datetime.fromtimestamp(float(text))
    except ValueError:
        pass
    moment = datetime.datetime.fromisoformat(text)
    return moment.replace(tzinfo=None)


def ctime_text(moment: datetime.datetime) -> str:
    """C ``ctime`` layout, locale independent: ``Fri Oct  3 23:16:52 2025``."""
    return "%s %s %2d %02d:%02d:%02d %d" % (
        _WEEKDAYS[moment.weekday()],
        _MONTHS[moment.month - 1],
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.year,
    )


# --------------------------------------------------------------------------- summary table

_TOP = "+" + "-" * 89 + "+"
_MID = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
_GPU_HEADER = [
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|=========================================+========================+======================|",
]
_PROC_HEADER = [
    "| Processes:" + " " * 78 + "|",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|" + "=" * 89 + "|",
]


def summary_process_name(name: str) -> str:
    """The process name as the summary prints it: at most 32 characters, keeping the tail.

    ``/home/u/miniforge3/envs/rapids-25.10/bin/python`` -> ``.../envs/rapids-25.10/bin/python``
    """
    return name if len(name) <= 32 else "..." + name[-29:]


def summary_gpu_name(name: str) -> str:
    """The name column (30 characters): longer names are cut to 23 and get `` ...``."""
    return name if len(name) <= 30 else name[:23] + " ..."


def render_summary(gpu: dict[str, Any], now: datetime.datetime) -> str:
    """The table ``nvidia-smi`` prints without arguments, newline-terminated::

        Fri Oct  3 23:16:52 2025       <- 7 trailing spaces
        +------...------+
        | NVIDIA-SMI 580.82.09              Driver Version: 580.82.09      CUDA Version: 13.0     |
        ...
        |   0  NVIDIA GB10                    Off |   0000000F:01:00.0 Off |                  N/A |
        | N/A   44C    P0             10W /  N/A  | Not Supported          |      0%      Default |
        ...
    """
    driver = str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))
    cuda = str(gpu.get("cuda_version", DEFAULT_CUDA_VERSION))
    lines = [ctime_text(now) + " " * 7, _TOP]
    lines.append(
        "| NVIDIA-SMI %s%s%s|"
        % (driver.ljust(23), "Driver Version: " + driver.ljust(15), "CUDA Version: " + cuda.ljust(9))
    )
    lines.append(_MID)
    lines.extend(_GPU_HEADER)
    persistence = "On" if gpu.get("persistence_mode") else "Off"
    display = "On" if gpu.get("display_active") else "Off"
    cell1 = "%4d  %s %s " % (int(gpu.get("index", 0)), summary_gpu_name(str(gpu.get("name", GB10_NAME))).ljust(30),
                             persistence.ljust(3))
    cell2 = "%19s %3s " % (str(gpu.get("bus_id", GB10_BUS_ID)), display)
    cell3 = "%21s " % "N/A"
    lines.append("|%s|%s|%s|" % (cell1, cell2, cell3))
    draw = "%dW" % int(float(gpu.get("power_draw_w", 0.0)))
    cell1 = " %3s  %3dC    %-2s%16s / %4s%s " % (
        "N/A",
        int(gpu.get("temperature_c", 0)),
        str(gpu.get("performance_state", "P0")),
        draw,
        "N/A",
        " ",
    )
    cell2 = " " + "Not Supported".ljust(23)
    cell3 = "%7d%%%13s " % (int(gpu.get("utilization_pct", 0)), str(gpu.get("compute_mode", "Default")))
    lines.append("|%s|%s|%s|" % (cell1, cell2, cell3))
    lines.append("|%s|%s|%21s |" % (" " * 41, " " * 24, "N/A"))
    lines.append(_MID)
    lines.append("")
    lines.append(_TOP)
    lines.extend(_PROC_HEADER)
    processes = gpu.get("processes") or []
    if not processes:
        lines.append("|" + "  No running processes found".ljust(89) + "|")
    for proc in processes:
        lines.append(
            "|%5d%6s%5s%16d%7s   %-32s%14s |"
            % (
                int(gpu.get("index", 0)),
                "N/A",
                "N/A",
                int(proc.get("pid", 0)),
                str(proc.get("type", "C")),
                summary_process_name(str(proc.get("name", ""))),
                "%dMiB" % int(proc.get("used_memory_mib", 0)),
            )
        )
    lines.append(_TOP)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- --query-gpu


class QueryFieldError(Exception):
    """A --query-gpu field nvidia-smi does not know; str() is the field name."""


NA = None  # a value nvidia-smi shows as [N/A]


def _mhz(value: Any) -> tuple[Any, str]:
    return (value, "MHz")


def _watts(value: Any) -> tuple[Any, str]:
    return (value, "W")


def _reason_value(bit: int) -> Callable[[dict[str, Any], datetime.datetime], Any]:
    return lambda g, _now: "Active" if int(g.get("event_reasons_active", 0)) & bit else "Not Active"


def _enabled(flag: Any) -> str:
    return "Enabled" if flag else "Disabled"


def _csv_timestamp(now: datetime.datetime) -> str:
    return "%04d/%02d/%02d %02d:%02d:%02d.%03d" % (
        now.year, now.month, now.day, now.hour, now.minute, now.second, now.microsecond // 1000)


# canonical name -> (unit shown in the header or "", value function)
# A value function returns a str (printed as is), None ([N/A]) or a number
# (printed with the unit, which nounits drops).
_FieldFn = Callable[[dict[str, Any], datetime.datetime], Any]
QUERY_FIELDS: dict[str, tuple[str, _FieldFn]] = {
    "timestamp": ("", lambda g, now: _csv_timestamp(now)),
    "driver_version": ("", lambda g, _n: str(g.get("driver_version", DEFAULT_DRIVER_VERSION))),
    "count": ("", lambda g, _n: "1"),
    "name": ("", lambda g, _n: str(g.get("name", GB10_NAME))),
    "serial": ("", lambda g, _n: NA),
    "uuid": ("", lambda g, _n: str(g.get("uuid", ""))),
    "index": ("", lambda g, _n: str(int(g.get("index", 0)))),
    "pci.bus_id": ("", lambda g, _n: str(g.get("bus_id", GB10_BUS_ID))),
    "pci.domain": ("", lambda g, _n: "0x%04X" % _bus_parts(str(g.get("bus_id", GB10_BUS_ID)))[0]),
    "pci.bus": ("", lambda g, _n: "0x%02X" % _bus_parts(str(g.get("bus_id", GB10_BUS_ID)))[1]),
    "pci.device": ("", lambda g, _n: "0x%02X" % _bus_parts(str(g.get("bus_id", GB10_BUS_ID)))[2]),
    "pci.device_id": ("", lambda g, _n: "0x2E1210DE"),
    "pcie.link.gen.current": ("", lambda g, _n: "1"),
    "pcie.link.gen.max": ("", lambda g, _n: "1"),
    "pcie.link.width.current": ("", lambda g, _n: "1"),
    "pcie.link.width.max": ("", lambda g, _n: "1"),
    "vbios_version": ("", lambda g, _n: str(g.get("vbios_version", "N/A"))),
    "display_active": ("", lambda g, _n: _enabled(g.get("display_active"))),
    "persistence_mode": ("", lambda g, _n: _enabled(g.get("persistence_mode"))),
    "addressing_mode": ("", lambda g, _n: "ATS"),
    "compute_mode": ("", lambda g, _n: str(g.get("compute_mode", "Default"))),
    "compute_cap": ("", lambda g, _n: str(g.get("compute_cap", "12.1"))),
    "pstate": ("", lambda g, _n: str(g.get("performance_state", "P0"))),
    "fan.speed": ("%", lambda g, _n: NA),
    "temperature.gpu": ("", lambda g, _n: str(int(g.get("temperature_c", 0)))),
    "temperature.memory": ("", lambda g, _n: NA),
    "utilization.gpu": ("%", lambda g, _n: int(g.get("utilization_pct", 0))),
    "utilization.memory": ("%", lambda g, _n: 0),
    "memory.total": ("MiB", lambda g, _n: NA),
    "memory.reserved": ("MiB", lambda g, _n: NA),
    "memory.used": ("MiB", lambda g, _n: NA),
    "memory.free": ("MiB", lambda g, _n: NA),
    "ecc.mode.current": ("", lambda g, _n: NA),
    "ecc.mode.pending": ("", lambda g, _n: NA),
    "power.management": ("", lambda g, _n: NA),
    "power.draw": ("W", lambda g, _n: float(g.get("power_draw_w", 0.0))),
    "power.draw.average": ("W", lambda g, _n: float(g.get("power_draw_w", 0.0))),
    "power.draw.instant": ("W", lambda g, _n: float(g.get("power_draw_w", 0.0))),
    "power.limit": ("W", lambda g, _n: NA),
    "enforced.power.limit": ("W", lambda g, _n: NA),
    "power.default_limit": ("W", lambda g, _n: NA),
    "power.min_limit": ("W", lambda g, _n: NA),
    "power.max_limit": ("W", lambda g, _n: NA),
    "clocks.current.graphics": ("MHz", lambda g, _n: current_sm_clock(g)),
    "clocks.current.sm": ("MHz", lambda g, _n: current_sm_clock(g)),
    "clocks.current.memory": ("MHz", lambda g, _n: NA),
    "clocks.current.video": ("MHz", lambda g, _n: int(g.get("clock_video_mhz", 2073))),
    "clocks.applications.graphics": ("MHz", lambda g, _n: int(g.get("clock_app_mhz", 2418))),
    "clocks.applications.memory": ("MHz", lambda g, _n: NA),
    "clocks.default_applications.graphics": ("MHz", lambda g, _n: int(g.get("clock_default_app_mhz", 2418))),
    "clocks.default_applications.memory": ("MHz", lambda g, _n: NA),
    "clocks.max.graphics": ("MHz", lambda g, _n: int(g.get("clock_max_mhz", 3003))),
    "clocks.max.sm": ("MHz", lambda g, _n: int(g.get("clock_max_mhz", 3003))),
    "clocks.max.memory": ("MHz", lambda g, _n: NA),
    "clocks_event_reasons.supported": ("", lambda g, _n: "0x%016X" % EVENT_REASONS_SUPPORTED),
    "clocks_event_reasons.active": ("", lambda g, _n: "0x%016X" % int(g.get("event_reasons_active", 0))),
}
for _csv, _bit, _label, _level in EVENT_REASONS:
    QUERY_FIELDS["clocks_event_reasons." + _csv] = ("", _reason_value(_bit))

# Other spellings nvidia-smi accepts; the header shows the canonical name.
QUERY_ALIASES: dict[str, str] = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "pstate": "pstate",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "clocks_throttle_reasons.supported": "clocks_event_reasons.supported",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
}
for _csv, _bit, _label, _level in EVENT_REASONS:
    QUERY_ALIASES["clocks_throttle_reasons." + _csv] = "clocks_event_reasons." + _csv


def canonical_field(field: str) -> str:
    """The canonical --query-gpu name (``clocks.sm`` -> ``clocks.current.sm``); raises QueryFieldError."""
    name = field.strip()
    name = QUERY_ALIASES.get(name, name)
    if name not in QUERY_FIELDS:
        raise QueryFieldError(field)
    return name


def query_header(field: str) -> str:
    """The CSV header of a field: ``clocks.sm`` -> ``clocks.current.sm [MHz]``."""
    name = canonical_field(field)
    unit = QUERY_FIELDS[name][0]
    return "%s [%s]" % (name, unit) if unit else name


def query_value(gpu: dict[str, Any], field: str, now: datetime.datetime, units: bool = True) -> str:
    """One CSV cell: ``2080 MHz`` / ``2080`` (nounits), ``5.04 W``, ``0 %``, ``[N/A]``, ``Enabled``."""
    name = canonical_field(field)
    unit, function = QUERY_FIELDS[name]
    value = function(gpu, now)
    if value is None:
        return "[N/A]"
    if isinstance(value, str):
        return value
    text = "%.2f" % value if unit == "W" else "%d" % int(value)
    return "%s %s" % (text, unit) if units and unit else text


def render_query_gpu(gpu: dict[str, Any], fields: list[str], now: datetime.datetime,
                     header: bool = True, units: bool = True) -> str:
    """``--query-gpu=...--format=csv[,noheader][,nounits]``, cells joined by ``", "``::

        name, driver_version, power.draw [W], power.limit [W], memory.total [MiB]
        NVIDIA GB10, 580.173.02, 5.04 W, [N/A], [N/A]

    Raises QueryFieldError (before printing anything) on an unknown field.
    """
    for field in fields:
        canonical_field(field)
    lines = []
    if header:
        lines.append(", ".join(query_header(field) for field in fields))
    lines.append(", ".join(query_value(gpu, field, now, units) for field in fields))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- -q

# -d names nvidia-smi accepts; SUPPORTED_CLOCKS is answered on its own.
DISPLAY_TYPES = {
    "MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS",
    "PERFORMANCE", "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS",
    "SUPPORTED_GPU_TARGET_TEMP", "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "RESET_STATUS",
    "GSP_FIRMWARE_VERSION", "POWER_SMOOTHING", "POWER_PROFILES",
}

# A -q line: (indent level, key, value). value None = a section heading.
_QLine = tuple[int, str, "str | None"]


def _bus_parts(bus_id: str) -> tuple[int, int, int, int]:
    """``0000000F:01:00.0`` -> (0xF, 1, 0, 0)."""
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)


def _masked_process_name(name: str) -> str:
    """-q on 580.126+ hides a process's directories: ``/usr/lib/xorg/Xorg`` -> ``............./Xorg``."""
    head, sep, tail = name.rpartition("/")
    return "." * len(head) + sep + tail if sep else name


def _mhz_text(value: Any) -> str:
    return "N/A" if value is None else "%d MHz" % int(value)


def _q_sections(gpu: dict[str, Any]) -> list[tuple[str, list[_QLine]]]:
    """The GPU part of -q as (display type, lines); display type "" = shown only by a full -q."""
    driver = str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))
    bus_id = str(gpu.get("bus_id", GB10_BUS_ID))
    domain, bus, device, _function = _bus_parts(bus_id)
    reasons = int(gpu.get("event_reasons_active", 0))
    counters = gpu.get("event_counters_us") or {}
    sm = current_sm_clock(gpu)
    power = "%.2f W" % float(gpu.get("power_draw_w", 0.0))
    na = "N/A"
    pdi = "0x%016x" % (uuidlib.UUID(str(gpu.get("uuid", "GPU-" + "0" * 32))[4:]).int >> 64)
    sections: list[tuple[str, list[_QLine]]] = [
        ("", [
            (1, "Product Name", str(gpu.get("name", GB10_NAME))),
            (1, "Product Brand", "NVIDIA"),
            (1, "Product Architecture", "Blackwell"),
            (1, "Display Mode", "Requested functionality has been deprecated"),
            (1, "Display Attached", "Yes" if gpu.get("display_active") else "No"),
            (1, "Display Active", _enabled(gpu.get("display_active"))),
            (1, "Persistence Mode", _enabled(gpu.get("persistence_mode"))),
            (1, "Addressing Mode", "ATS"),
            (1, "MIG Mode", None), (2, "Current", na), (2, "Pending", na),
            (1, "Accounting Mode", "Disabled"),
            (1, "Accounting Mode Buffer Size", "4000"),
            (1, "Driver Model", None), (2, "Current", na), (2, "Pending", na),
            (1, "Serial Number", na),
            (1, "GPU UUID", str(gpu.get("uuid", ""))),
            (1, "GPU PDI", pdi),
            (1, "Minor Number", "0"),
            (1, "VBIOS Version", str(gpu.get("vbios_version", na))),
            (1, "MultiGPU Board", "No"),
            (1, "Board ID", "0x%x" % ((domain << 16) | (bus << 8) | device)),
            (1, "Board Part Number", na),
            (1, "GPU Part Number", na),
            (1, "FRU Part Number", na),
            (1, "Platform Info", None),
            (2, "Chassis Serial Number", na), (2, "Slot Number", na), (2, "Tray Index", na),
            (2, "Host ID", na), (2, "Peer Type", na), (2, "Module Id", "1"),
            (2, "GPU Fabric GUID", na),
            (1, "Inforom Version", None),
            (2, "Image Version", na), (2, "OEM Object", na), (2, "ECC Object", na),
            (2, "Power Management Object", na),
            (1, "Inforom BBX Object Flush", None), (2, "Latest Timestamp", na), (2, "Latest Duration", na),
            (1, "GPU Operation Mode", None), (2, "Current", na), (2, "Pending", na),
            (1, "GPU C2C Mode", "Enabled"),
            (1, "GPU Virtualization Mode", None),
            (2, "Virtualization Mode", "None"), (2, "Host VGPU Mode", na), (2, "vGPU Heterogeneous Mode", na),
            (1, "GPU Recovery Action", "None"),
        ]),
        ("GSP_FIRMWARE_VERSION", [(1, "GSP Firmware Version", driver)]),
        ("", [
            (1, "IBMNPU", None), (2, "Relaxed Ordering Mode", na),
            (1, "PCI", None),
            (2, "Bus", "0x%02X" % bus),
            (2, "Device", "0x%02X" % device),
            (2, "Domain", "0x%04X" % domain),
            (2, "Base Classcode", "0x3"),
            (2, "Sub Classcode", "0x0"),
            (2, "Device Id", "0x2E1210DE"),
            (2, "Bus Id", bus_id),
            (2, "Sub System Id", na),
            (2, "GPU Link Info", None),
            (3, "PCIe Generation", None),
            (4, "Max", "1"), (4, "Current", "1"), (4, "Device Current", "1"), (4, "Device Max", "1"),
            (4, "Host Max", na),
            (3, "Link Width", None), (4, "Max", "1x"), (4, "Current", "1x"),
            (2, "Bridge Chip", None), (3, "Type", na), (3, "Firmware", na),
            (2, "Replays Since Reset", "0"),
            (2, "Replay Number Rollovers", "0"),
            (2, "Tx Throughput", na),
            (2, "Rx Throughput", na),
            (2, "Atomic Caps Outbound", na),
            (2, "Atomic Caps Inbound", na),
            (1, "Fan Speed", na),
        ]),
        ("PERFORMANCE", [
            (1, "Performance State", str(gpu.get("performance_state", "P0"))),
            (1, "Clocks Event Reasons", None),
        ] + [
            (level, label, "Active" if reasons & bit else "Not Active")
            for _csv, bit, label, level in EVENT_REASONS
        ] + [
            (1, "Clocks Event Reasons Counters", None),
        ] + [
            (2, label, "%d us" % int(counters.get(key, 0))) for label, key in EVENT_COUNTERS
        ] + [
            (1, "Sparse Operation Mode", na),
        ]),
        ("MEMORY", [
            (1, "FB Memory Usage", None),
            (2, "Total", na), (2, "Reserved", na), (2, "Used", na), (2, "Free", na),
            (1, "BAR1 Memory Usage", None),
            (2, "Total", na), (2, "Used", na), (2, "Free", na),
            (1, "Conf Compute Protected Memory Usage", None),
            (2, "Total", "0 MiB"), (2, "Used", "0 MiB"), (2, "Free", "0 MiB"),
        ]),
        ("COMPUTE", [(1, "Compute Mode", str(gpu.get("compute_mode", "Default")))]),
        ("UTILIZATION", [
            (1, "Utilization", None),
            (2, "GPU", "%d %%" % int(gpu.get("utilization_pct", 0))),
            (2, "Memory", "0 %"), (2, "Encoder", "0 %"), (2, "Decoder", "0 %"),
            (2, "JPEG", "0 %"), (2, "OFA", "0 %"),
        ]),
        ("ENCODER_STATS", [
            (1, "Encoder Stats", None),
            (2, "Active Sessions", "0"), (2, "Average FPS", "0"), (2, "Average Latency", "0"),
        ]),
        ("FBC_STATS", [
            (1, "FBC Stats", None),
            (2, "Active Sessions", "0"), (2, "Average FPS", "0"), (2, "Average Latency", "0"),
        ]),
        ("", [
            (1, "DRAM Encryption Mode", None), (2, "Current", na), (2, "Pending", na),
        ]),
        ("ECC", [
            (1, "ECC Mode", None), (2, "Current", na), (2, "Pending", na),
            (1, "ECC Errors", None),
            (2, "Volatile", None),
            (3, "SRAM Correctable", na), (3, "SRAM Uncorrectable Parity", na),
            (3, "SRAM Uncorrectable SEC-DED", na), (3, "DRAM Correctable", na),
            (3, "DRAM Uncorrectable", na),
            (2, "Aggregate", None),
            (3, "SRAM Correctable", na), (3, "SRAM Uncorrectable Parity", na),
            (3, "SRAM Uncorrectable SEC-DED", na), (3, "DRAM Correctable", na),
            (3, "DRAM Uncorrectable", na), (3, "SRAM Threshold Exceeded", na),
            (2, "Aggregate Uncorrectable SRAM Sources", None),
            (3, "SRAM L2", na), (3, "SRAM SM", na), (3, "SRAM Microcontroller", na),
            (3, "SRAM PCIE", na), (3, "SRAM Other", na),
            (2, "Channel Repair Pending", "No"),
            (2, "TPC Repair Pending", "No"),
            (2, "Unrepairable Memory", na),
        ]),
        ("PAGE_RETIREMENT", [
            (1, "Retired Pages", None),
            (2, "Single Bit ECC", na), (2, "Double Bit ECC", na), (2, "Pending Page Blacklist", na),
        ]),
        ("ROW_REMAPPER", [(1, "Remapped Rows", na)]),
        ("TEMPERATURE", [
            (1, "Temperature", None),
            (2, "GPU Current Temp", "%d C" % int(gpu.get("temperature_c", 0))),
            (2, "GPU T.Limit Temp", na),
            (2, "GPU Shutdown T.Limit Temp", na),
            (2, "GPU Slowdown T.Limit Temp", na),
            (2, "GPU Max Operating T.Limit Temp", na),
            (2, "GPU Target Temperature", na),
            (2, "Memory Current Temp", na),
            (2, "Memory Max Operating T.Limit Temp", na),
        ]),
        ("POWER", [
            (1, "GPU Power Readings", None),
            (2, "Average Power Draw", power),
            (2, "Instantaneous Power Draw", power),
            (2, "Current Power Limit", na),
            (2, "Requested Power Limit", na),
            (2, "Default Power Limit", na),
            (2, "Min Power Limit", na),
            (2, "Max Power Limit", na),
            (1, "GPU Memory Power Readings ", None),
            (2, "Average Power Draw", na),
            (2, "Instantaneous Power Draw", na),
            (1, "Module Power Readings", None),
            (2, "Average Power Draw", na),
            (2, "Instantaneous Power Draw", na),
            (2, "Current Power Limit", na),
            (2, "Requested Power Limit", na),
            (2, "Default Power Limit", na),
            (2, "Min Power Limit", na),
            (2, "Max Power Limit", na),
        ]),
        ("POWER_SMOOTHING", [(1, "Power Smoothing", na)]),
        ("POWER_PROFILES", [
            (1, "Workload Power Profiles", None),
            (2, "Requested Profiles", na), (2, "Enforced Profiles", na),
        ]),
        ("CLOCK", [
            (1, "Clocks", None),
            (2, "Graphics", _mhz_text(sm)),
            (2, "SM", _mhz_text(sm)),
            (2, "Memory", na),
            (2, "Video", _mhz_text(gpu.get("clock_video_mhz", 2073))),
            (1, "Applications Clocks", None),
            (2, "Graphics", _mhz_text(gpu.get("clock_app_mhz", 2418))),
            (2, "Memory", na),
            (1, "Default Applications Clocks", None),
            (2, "Graphics", _mhz_text(gpu.get("clock_default_app_mhz", 2418))),
            (2, "Memory", na),
            (1, "Deferred Clocks", None),
            (2, "Memory", na),
            (1, "Max Clocks", None),
            (2, "Graphics", _mhz_text(gpu.get("clock_max_mhz", 3003))),
            (2, "SM", _mhz_text(gpu.get("clock_max_mhz", 3003))),
            (2, "Memory", na),
            (2, "Video", _mhz_text(gpu.get("clock_max_video_mhz", 2073))),
            (1, "Max Customer Boost Clocks", None),
            (2, "Graphics", na),
            (1, "Clock Policy", None),
            (2, "Auto Boost", na),
            (2, "Auto Boost Default", na),
        ]),
        ("", [
            (1, "Fabric", None),
            (2, "State", na), (2, "Status", na), (2, "CliqueId", na), (2, "ClusterUUID", na),
            (2, "Health", None),
            (3, "Summary", na), (3, "Bandwidth", na), (3, "Route Recovery in progress", na),
            (3, "Route Unhealthy", na), (3, "Access Timeout Recovery", na),
            (3, "Incorrect Configuration", na), (3, "Partition Assigned", na),
        ]),
        ("PIDS", []),  # rendered by _q_processes (its own column)
        ("", [(1, "Capabilities", None), (2, "EGM", "disabled")]),
    ]
    return sections


def _q_processes(gpu: dict[str, Any], width: int) -> list[str]:
    """The -q Processes block; its rows keep the old 42-column alignment even where the rest is 55."""
    processes = gpu.get("processes") or []
    if not processes:
        return ["    Processes".ljust(width) + ": None"]
    mask = width > 42
    lines = ["    Processes"]
    for proc in processes:
        name = str(proc.get("name", ""))
        rows = [
            (8, "GPU instance ID", "N/A"),
            (8, "Compute instance ID", "N/A"),
            (8, "Process ID", str(int(proc.get("pid", 0)))),
            (12, "Type", str(proc.get("type", "C"))),
            (12, "Name", _masked_process_name(name) if mask else name),
            (12, "Used GPU Memory", "%d MiB" % int(proc.get("used_memory_mib", 0))),
        ]
        lines.extend((" " * indent + key).ljust(42) + ": " + value for indent, key, value in rows)
    return lines


def render_q(gpu: dict[str, Any], now: datetime.datetime, displays: list[str] | None = None) -> str:
    """``nvidia-smi -q [-d TYPE,...]``: the NVSMI LOG, starting and ending with a blank line::

        <blank>
        ==============NVSMI LOG==============
        <blank>
        Timestamp                                              : Fri Oct  3 23:16:52 2025
        Driver Version                                         : 580.173.02
        CUDA Version                                           : 13.0
        <blank>
        Attached GPUs                                          : 1
        GPU 0000000F:01:00.0
            Product Name                                       : NVIDIA GB10
            ...
            Max Clocks
                Graphics                                       : 3003 MHz
        <blank>

    ``displays`` (upper-case -d names) keeps only those sections; None = everything.
    """
    driver = str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))
    width = query_key_width(driver)

    def kv(indent: int, key: str, value: str | None) -> str:
        text = " " * (4 * indent) + key
        return text if value is None else text.ljust(width) + ": " + value

    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        kv(0, "Timestamp", ctime_text(now)),
        kv(0, "Driver Version", driver),
        kv(0, "CUDA Version", str(gpu.get("cuda_version", DEFAULT_CUDA_VERSION))),
        "",
        kv(0, "Attached GPUs", "1"),
        "GPU %s" % gpu.get("bus_id", GB10_BUS_ID),
    ]
    wanted = None if displays is None else {d.upper() for d in displays}
    for display, section in _q_sections(gpu):
        if wanted is not None and display not in wanted:
            continue
        if display == "PIDS":
            lines.extend(_q_processes(gpu, width))
            continue
        lines.extend(kv(indent, key, value) for indent, key, value in section)
    if wanted is not None and "SUPPORTED_CLOCKS" in wanted:
        lines.append(kv(1, "Supported Clocks", "N/A"))
    return "\n".join(lines) + "\n\n"


# --------------------------------------------------------------------------- small forms


def render_version(gpu: dict[str, Any]) -> str:
    """``nvidia-smi --version``::

        NVIDIA-SMI version  : 580.173.02
        NVML version        : 580.173
        DRIVER version      : 580.173.02
        CUDA Version        : 13.0
    """
    driver = str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))
    return (
        "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n"
        % (driver, nvml_version(driver), driver, gpu.get("cuda_version", DEFAULT_CUDA_VERSION))
    )


def render_list(gpu: dict[str, Any]) -> str:
    """``nvidia-smi -L``: ``GPU 0: NVIDIA GB10 (UUID: GPU-...)``."""
    return "GPU %d: %s (UUID: %s)\n" % (int(gpu.get("index", 0)), gpu.get("name", GB10_NAME), gpu.get("uuid", ""))


def render_help(gpu: dict[str, Any]) -> str:
    """An abbreviated ``nvidia-smi -h`` (the options this stand-in knows)."""
    driver = str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION))
    return "\n".join([
        "NVIDIA System Management Interface -- v%s" % driver,
        "",
        "NVSMI provides monitoring information for each of NVIDIA's Tesla devices",
        "and each of its high-end Fermi-based and Kepler-based Quadro devices.",
        "",
        "nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...",
        "",
        "    -h,   --help                Print usage information and exit.",
        "          --version             Print version information and exit.",
        "",
        "  LIST OPTIONS:",
        "",
        "    -L,   --list-gpus           Display a list of GPUs connected to the system.",
        "",
        "  SUMMARY OPTIONS:",
        "",
        "    <no arguments>              Show a summary of GPUs connected to the system.",
        "",
        "    [plus any of]",
        "",
        "    -i,   --id=                 Target a specific GPU.",
        "",
        "  QUERY OPTIONS:",
        "",
        "    -q,   --query               Display GPU or Unit info.",
        "",
        "    [plus any of]",
        "",
        "    -i,   --id=                 Target a specific GPU or Unit.",
        "    -d,   --display=            Display only selected information: MEMORY,",
        "                                    UTILIZATION, ECC, TEMPERATURE, POWER, CLOCK,",
        "                                    COMPUTE, PIDS, PERFORMANCE, SUPPORTED_CLOCKS, ...",
        "",
        "  SELECTIVE QUERY OPTIONS:",
        "",
        "    Allows the caller to pass an explicit list of properties to query.",
        "",
        "    [one of]",
        "",
        "    --query-gpu                 Information about GPU.",
        "                                Call --help-query-gpu for more info.",
        "",
        "    [mandatory]",
        "",
        "    --format=                   Comma separated list of format options:",
        "                                  csv - comma separated values (MANDATORY)",
        "                                  noheader - skip the first line with column headers",
        "                                  nounits - don't print units for numerical values",
        "",
        "  DEVICE MODIFICATION OPTIONS:",
        "",
        "    [any one of]",
        "",
        "    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED",
        "    -pl,  --power-limit=        Specifies maximum power management limit in watts.",
        "    -lgc  --lock-gpu-clocks=    Specifies <minGpuClock,maxGpuClock> clocks as a",
        "                                    pair (e.g. 1500,1500) that defines the range",
        "                                    of desired locked GPU clock speed in MHz.",
        "    -rgc  --reset-gpu-clocks",
        "                                Resets the Gpu clocks to the default values.",
        "",
        "    [plus optional]",
        "",
        "    -i,   --id=                 Target a specific GPU.",
        "",
        "Please see the nvidia-smi(1) manual page for more detailed information.",
        "",
    ])


# --------------------------------------------------------------------------- command line


class UsageError(Exception):
    """The arguments do not make a command nvidia-smi accepts."""


_VALUE_OPTIONS = {
    "-i": "id", "--id": "id",
    "-d": "display", "--display": "display",
    "-lgc": "lgc", "--lock-gpu-clocks": "lgc",
    "-pl": "pl", "--power-limit": "pl",
    "-pm": "pm", "--persistence-mode": "pm",
    "--query-gpu": "query_gpu",
    "--format": "format",
}
_FLAG_OPTIONS = {
    "-q": "query", "--query": "query",
    "-L": "list", "--list-gpus": "list",
    "-rgc": "rgc", "--reset-gpu-clocks": "rgc",
    "-h": "help", "--help": "help",
    "--version": "version",
}
_ACTIONS = ("query", "list", "rgc", "version", "lgc", "pl", "pm", "query_gpu")


def parse_args(argv: list[str]) -> dict[str, Any]:
    """Turn argv into ``{"action": "summary"|"query"|..., option: value}``; raises UsageError.

    Options take their value as the next word or after ``=``: ``-lgc 0,2100``,
    ``--lock-gpu-clocks=0,2100``, ``-i 0``, ``--format=csv,noheader``.
    """
    options: dict[str, Any] = {}
    words = list(argv)
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        name, has_value, inline = word.partition("=")
        if name in _VALUE_OPTIONS:
            key = _VALUE_OPTIONS[name]
            if has_value:
                value = inline
            elif position < len(words):
                value = words[position]
                position += 1
            else:
                raise UsageError(word)
            if key in options:
                raise UsageError(word)
            options[key] = value
        elif word in _FLAG_OPTIONS:
            key = _FLAG_OPTIONS[word]
            if key in options:
                raise UsageError(word)
            options[key] = True
        else:
            raise UsageError(word)
    if options.get("help"):
        return {"action": "help"}
    actions = [key for key in _ACTIONS if key in options]
    if len(actions) > 1:
        raise UsageError(" ".join(argv))
    action = actions[0] if actions else "summary"
    if "display" in options and action != "query":
        raise UsageError("-d")
    if action == "query_gpu" and "format" not in options:
        raise UsageError("--format")
    if "format" in options and action != "query_gpu":
        raise UsageError("--format")
    options["action"] = action
    return options


def _is_root() -> bool:
    forced = os.environ.get("SPARK_SIM_EUID")
    if forced not in (None, ""):
        return int(forced) == 0
    return os.geteuid() == 0


def _matches_id(gpu: dict[str, Any], wanted: str) -> bool:
    """-i accepts the index, the PCI bus id (any zero padding) or the UUID."""
    text = wanted.strip()
    if text.isdigit():
        return int(text) == int(gpu.get("index", 0))
    if text.upper().startswith("GPU-"):
        return text.lower() == str(gpu.get("uuid", "")).lower()
    try:
        return _bus_parts(text) == _bus_parts(str(gpu.get("bus_id", GB10_BUS_ID)))
    except ValueError:
        return False


def _parse_clock(word: str, gpu: dict[str, Any]) -> int:
    """One -lgc value: MHz, or ``tdp`` (the default applications clock)."""
    text = word.strip()
    if text.lower() == "tdp":
        return int(gpu.get("clock_default_app_mhz", 2418))
    if not text.isdigit():
        raise UsageError(word)
    return int(text)


# How -lgc fails under a fault (state["faults"]). Where these texts come from:
# - lgc_unsupported: real output of nvidia-smi --lock-gpu-clocks on GPUs that cannot lock (a K80
#   node's captured session; Pascal reports say the same and that it "still exit[s] 0"): one
#   "Setting locked GPU clocks is not supported for GPU <bus id>." and "Treating as warning and moving
#   on." per GPU, then "All done.", exit 0, no lock. The worst case for a check that trusts the exit code.
# - lgc_fails: no capture of -lgc failing with an NVML error was found (searched public GitHub issues,
#   code and web pages for the -lgc error texts). The text follows the form nvidia-smi uses for an NVML error from a device
#   modification, seen in captures of other options ("Unable to disable MIG Mode for GPU <bus id>: In use
#   by another client" / "Terminating early due to previous errors."), with NVML's generic error string;
#   exit 255 is nvidia-smi(1)'s "Other error or internal driver error occurred".
LGC_FAULTS = ("lgc_fails", "lgc_unsupported")


def _lgc_fault(state: dict[str, Any] | None) -> str | None:
    """The -lgc fault the state sets (the first of LGC_FAULTS that is true), else None."""
    faults = (state or {}).get("faults") or {}
    return next((name for name in LGC_FAULTS if faults.get(name)), None)


def _lock_clocks(gpu: dict[str, Any], spec: str, out: TextIO, fault: str | None = None) -> int:
    """-lgc: validate, record ``locked_clocks`` and print what nvidia-smi prints."""
    bus_id = str(gpu.get("bus_id", GB10_BUS_ID))
    words = spec.split(",")
    if len(words) not in (1, 2) or not all(word.strip() for word in words):
        raise UsageError(spec)
    if len(words) == 1:
        words = [words[0], words[0]]
    low, high = (_parse_clock(word, gpu) for word in words)
    if not _is_root():
        out.write("The current user does not have permission to change clocks for GPU %s.\n" % bus_id)
        out.write(MSG_TERMINATING + "\n")
        return EXIT_NO_PERMISSION
    if low > high or high > int(gpu.get("clock_max_mhz", 3003)):
        out.write("Unable to set locked GPU clocks for GPU %s: Invalid Argument\n" % bus_id)
        out.write(MSG_TERMINATING + "\n")
        return EXIT_INVALID_ARGUMENT
    if fault == "lgc_unsupported":
        out.write("Setting locked GPU clocks is not supported for GPU %s.\n" % bus_id)
        out.write("Treating as warning and moving on.\n")
        out.write("All done.\n")
        return EXIT_OK
    if fault == "lgc_fails":
        out.write("Unable to set locked GPU clocks for GPU %s: Unknown Error\n" % bus_id)
        out.write(MSG_TERMINATING + "\n")
        return EXIT_OTHER_ERROR
    gpu["locked_clocks"] = {"min_mhz": low, "max_mhz": high}
    out.write('GPU clocks set to "(gpuClkMin %s, gpuClkMax %s)" for GPU %s\n'
              % (words[0].strip(), words[1].strip(), bus_id))
    if not gpu.get("persistence_mode"):
        out.write(
            "\nWarning: persistence mode is disabled on device %s. See the Known Issues section of the "
            "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
            "information on how to enable persistence mode.\n" % bus_id
        )
    out.write("All done.\n")
    return EXIT_OK


def _reset_clocks(gpu: dict[str, Any], out: TextIO) -> int:
    """-rgc: clear the lock."""
    if not _is_root():
        out.write("The current user does not have permission to change clocks for GPU %s.\n"
                  % gpu.get("bus_id", GB10_BUS_ID))
        out.write(MSG_TERMINATING + "\n")
        return EXIT_NO_PERMISSION
    gpu["locked_clocks"] = None
    out.write("All done.\n")
    return EXIT_OK


def _set_persistence(gpu: dict[str, Any], value: str, out: TextIO) -> int:
    """-pm 0|1 (also DISABLED|ENABLED)."""
    bus_id = str(gpu.get("bus_id", GB10_BUS_ID))
    wanted = {"0": False, "1": True, "DISABLED": False, "ENABLED": True}.get(value.strip().upper())
    if wanted is None:
        raise UsageError(value)
    if not _is_root():
        out.write("Unable to set persistence mode for GPU %s: Insufficient Permissions\n" % bus_id)
        out.write(MSG_TERMINATING + "\n")
        return EXIT_NO_PERMISSION
    word = "Enabled" if wanted else "Disabled"
    if bool(gpu.get("persistence_mode")) == wanted:
        out.write("Persistence mode is already %s for GPU %s.\n" % (word, bus_id))
    else:
        gpu["persistence_mode"] = wanted
        out.write("%s Legacy persistence mode for GPU %s.\n" % (word, bus_id))
    out.write("All done.\n")
    return EXIT_OK


def _power_limit(gpu: dict[str, Any], value: str, out: TextIO) -> int:
    """-pl: GB10 exposes no power limit; nvidia-smi refuses (as root or not)."""
    try:
        float(value)
    except ValueError:
        raise UsageError(value) from None
    out.write("Changing power management limit is not supported in current scope for GPU: %s.\n"
              % gpu.get("bus_id", GB10_BUS_ID))
    out.write("All done.\n")
    return EXIT_NOT_AVAILABLE


def run(options: dict[str, Any], state: dict[str, Any] | None, out: TextIO,
        now: datetime.datetime) -> tuple[int, bool]:
    """Carry out parsed options against a loaded state; returns (exit code, state changed)."""
    gpu = (state or {}).get("gpu")
    action = options["action"]
    if action == "help":
        out.write(render_help(gpu or {}))
        return EXIT_OK, False
    if not isinstance(gpu, dict) or not gpu.get("driver_loaded", True):
        out.write(MSG_DRIVER_NOT_LOADED + "\n")
        return EXIT_DRIVER_NOT_LOADED, False
    userspace = installed_userspace_version()
    if userspace and userspace != str(gpu.get("driver_version", DEFAULT_DRIVER_VERSION)):
        out.write("%s\nNVML library version: %s\n" % (MSG_VERSION_MISMATCH, nvml_version(userspace)))
        return EXIT_LIB_RM_VERSION_MISMATCH, False
    if action == "version":
        out.write(render_version(gpu))
        return EXIT_OK, False
    if "id" in options and not _matches_id(gpu, str(options["id"])):
        out.write(MSG_NO_DEVICES + "\n")
        return EXIT_NOT_FOUND, False
    if action == "summary":
        out.write(render_summary(gpu, now))
        return EXIT_OK, False
    if action == "list":
        out.write(render_list(gpu))
        return EXIT_OK, False
    if action == "query":
        displays = None
        if "display" in options:
            displays = [d.strip().upper() for d in str(options["display"]).split(",") if d.strip()]
            if not displays or any(d not in DISPLAY_TYPES for d in displays):
                raise UsageError(str(options["display"]))
        out.write(render_q(gpu, now, displays))
        return EXIT_OK, False
    if action == "query_gpu":
        formats = [f.strip().lower() for f in str(options["format"]).split(",") if f.strip()]
        if "csv" not in formats or any(f not in ("csv", "noheader", "nounits") for f in formats):
            raise UsageError(str(options["format"]))
        fields = [f for f in str(options["query_gpu"]).split(",") if f.strip()]
        if not fields:
            raise UsageError("--query-gpu")
        try:
            text = render_query_gpu(gpu, fields, now, "noheader" not in formats, "nounits" not in formats)
        except QueryFieldError as error:
            out.write('Field "%s" is not a valid field to query.\n\n' % error)
            return EXIT_INVALID_ARGUMENT, False
        out.write(text)
        return EXIT_OK, False
    if action == "lgc":
        before = gpu.get("locked_clocks")
        code = _lock_clocks(gpu, str(options["lgc"]), out, _lgc_fault(state))
        return code, gpu.get("locked_clocks") != before
    if action == "rgc":
        before = gpu.get("locked_clocks")
        code = _reset_clocks(gpu, out)
        return code, gpu.get("locked_clocks") != before
    if action == "pm":
        before = gpu.get("persistence_mode")
        code = _set_persistence(gpu, str(options["pm"]), out)
        return code, gpu.get("persistence_mode") != before
    if action == "pl":
        return _power_limit(gpu, str(options["pl"]), out), False
    raise UsageError(action)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """The nvidia-smi stand-in: parse, load the state, answer, save if the state changed."""
    out = out or sys.stdout
    try:
        options = parse_args(list(sys.argv[1:] if argv is None else argv))
    except UsageError:
        out.write(MSG_INVALID_COMBINATION + "\n")
        return EXIT_INVALID_ARGUMENT
    path = statefile.state_path()
    try:
        state: dict[str, Any] | None = statefile.load(path)
    except FileNotFoundError:
        state = None
    try:
        now = parse_now(os.environ.get("SPARK_SIM_NOW"))
        code, changed = run(options, state, out, now)
    except UsageError:
        out.write(MSG_INVALID_COMBINATION + "\n")
        return EXIT_INVALID_ARGUMENT
    if changed and state is not None:
        statefile.save(state, path)
    return code
