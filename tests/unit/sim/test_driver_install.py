"""The sim's driver packaging: the loaded kernel module follows the installed
userspace driver only at power-on (gpu.apply_driver_install), the stand-in
/proc/driver/nvidia/version shows it, and nvidia-smi reports the real
"Driver/library version mismatch" (exit 18) while they differ."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"))

from sparksim import gpu as gpumod  # noqa: E402


@pytest.fixture()
def node(tmp_path, monkeypatch):
    userspace = tmp_path / "driver-userspace-version"
    proc = tmp_path / "proc"
    monkeypatch.setenv("SPARK_SIM_DRIVER_USERSPACE", str(userspace))
    monkeypatch.setenv("SPARK_SIM_PROC", str(proc))
    monkeypatch.setenv("SPARK_SIM_FS_ROOT", str(tmp_path / "root"))  # no /boot kernels unless a test writes them
    state = {"hostname": "spark-test", "gpu": gpumod.default_gpu("spark-test")}
    return state, userspace, proc / "driver" / "nvidia" / "version"


def smi(state, *args):
    out = io.StringIO()
    code, _changed = gpumod.run(gpumod.parse_args(list(args)), state, out, gpumod.parse_now("2026-11-29T12:00:00"))
    return code, out.getvalue()


def test_upgrade_without_reboot_is_a_version_mismatch(node):
    state, userspace, _proc = node
    userspace.write_text("580.173.02\n")
    assert smi(state, "--query-gpu=driver_version", "--format=csv,noheader") == (0, "580.173.02\n")
    userspace.write_text("580.178.04\n")  # libnvidia-compute-580 postinst of an upgrade
    code, text = smi(state, "--query-gpu=driver_version", "--format=csv,noheader")
    assert code == 18
    assert text == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178\n"
    assert smi(state, "-h")[0] == 0  # help needs no NVML


def test_power_on_loads_the_installed_driver_and_writes_proc(node):
    state, userspace, proc = node
    state["gpu"]["driver_version"] = "580.159.03"
    userspace.write_text("580.173.02\n")
    assert gpumod.apply_driver_install(state) == ["gpu: NVIDIA kernel module 580.173.02 loaded (was 580.159.03)"]
    assert state["gpu"]["driver_version"] == "580.173.02" and state["gpu"]["driver_loaded"] is True
    assert proc.read_text().startswith("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build")
    assert gpumod.apply_driver_install(state) == []  # nothing changed at the next boot
    assert smi(state, "--query-gpu=driver_version", "--format=csv,noheader") == (0, "580.173.02\n")


def test_no_driver_installed_means_no_module(node):
    state, userspace, proc = node
    assert not userspace.exists()
    assert gpumod.apply_driver_install(state) == ["gpu: no NVIDIA kernel module for 6.17.0-1014-nvidia: none loaded (was 580.173.02)"]
    assert state["gpu"]["driver_loaded"] is False
    assert not proc.exists()
    assert smi(state, "-L")[0] == gpumod.EXIT_DRIVER_NOT_LOADED
    userspace.write_text("580.173.02\n")  # installed now: still not loaded until the next boot
    assert smi(state, "-L")[0] == gpumod.EXIT_DRIVER_NOT_LOADED
    assert gpumod.apply_driver_install(state) == ["gpu: NVIDIA kernel module 580.173.02 loaded (was none)"]
    assert proc.exists()


def _kernel(root, release, module=None, dkms=None):
    (root / "boot").mkdir(parents=True, exist_ok=True)
    (root / "boot" / ("vmlinuz-" + release)).write_text("kernel\n")
    for rel, version in (("kernel/nvidia-580-open/nvidia.ko", module), ("updates/dkms/nvidia.ko", dkms)):
        if version:
            path = root / "lib" / "modules" / release / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("spark-sim stand-in nvidia.ko\nversion=%s\n" % version)


def test_the_newest_kernel_boots_with_the_module_it_has(node, tmp_path):
    state, userspace, proc = node
    root = tmp_path / "root"
    userspace.write_text("580.173.02\n")
    _kernel(root, "6.17.0-1014-nvidia", module="580.173.02")
    assert gpumod.apply_driver_install(state) == []
    assert state["kernel"] == {"release": "6.17.0-1014-nvidia",
                               "module": "/lib/modules/6.17.0-1014-nvidia/kernel/nvidia-580-open/nvidia.ko"}
    assert (proc.parents[2] / "sys" / "kernel" / "osrelease").read_text() == "6.17.0-1014-nvidia\n"
    # a kernel flavour update without its module: the next boot has no driver (nvidia-smi exit 9)
    _kernel(root, "6.17.0-1026-nvidia")
    assert gpumod.apply_driver_install(state) == [
        "kernel: 6.17.0-1026-nvidia (was 6.17.0-1014-nvidia)",
        "gpu: no NVIDIA kernel module for 6.17.0-1026-nvidia: none loaded (was 580.173.02)"]
    assert smi(state)[0] == 9 and not proc.exists()
    # its DKMS build (or precompiled package) present: loaded again
    _kernel(root, "6.17.0-1026-nvidia", dkms="580.173.02")
    assert gpumod.apply_driver_install(state) == [
        "gpu: NVIDIA kernel module 580.173.02 loaded from /lib/modules/6.17.0-1026-nvidia/updates/dkms/nvidia.ko (was none)"]
    assert smi(state, "--query-gpu=driver_version", "--format=csv,noheader") == (0, "580.173.02\n")


def test_write_proc_follows_a_state_edit(node):
    state, _userspace, proc = node
    state["gpu"]["driver_version"] = "580.95.05"
    gpumod.write_proc(state)
    assert "  580.95.05  " in proc.read_text()
    state["gpu"]["driver_loaded"] = False
    gpumod.write_proc(state)
    assert not proc.exists()


def _spark_sim_module():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("spark_sim_cli", str(REPO / "sim" / "spark-sim"))
    spec = importlib.util.spec_from_loader("spark_sim_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_spark_sim_installs_what_the_inventory_says_a_node_ships_with(tmp_path):
    """spark_sim_driver_version / spark_sim_cuda_toolkits / spark_sim_preinstalled -> apt specs
    (the driver's package names follow its branch: -580 up to 580, none from 590 on)."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  vars:\n    spark_sim_mgmt_subnet: 10.77.250.0/24\n    spark_sim_fabric_subnets: [192.168.250.0/24]\n"
        "  children:\n    spark_head:\n      hosts:\n        a:\n          ansible_host: 10.77.250.11\n"
        "          dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.250.1}]\n"
        "    spark_workers:\n      hosts:\n"
        "        b:\n          ansible_host: 10.77.250.12\n"
        "          dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.250.2}]\n"
        "          spark_sim_driver_version: ''\n"
        "        c:\n          ansible_host: 10.77.250.13\n"
        "          dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.250.3}]\n"
        "          spark_sim_driver_version: 590.48.01\n          spark_sim_cuda_toolkits: ['13.0', '13.3']\n"
        "          spark_sim_preinstalled: [nvidia-driver-pinning-580]\n"
        "        d:\n          ansible_host: 10.77.250.14\n"
        "          dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.250.4}]\n"
        "          spark_sim_driver_profile: dkms\n          spark_sim_driver_version: 580.159.03\n")
    sim = _spark_sim_module().Sim(str(inv))
    kernel = ["linux-nvidia-hwe-24.04=6.17.0-1014.14", "linux-image-nvidia-hwe-24.04=6.17.0-1014.14",
              "linux-headers-nvidia-hwe-24.04=6.17.0-1014.14", "linux-image-6.17.0-1014-nvidia=6.17.0-1014.14"]
    assert sim.preinstalled("a") == kernel + [
        "nvidia-driver-580-open=580.173.02-*", "nvidia-kernel-common-580=580.173.02-*",
        "nvidia-utils-580=580.173.02-*", "libnvidia-compute-580=580.173.02-*", "libnvidia-common-580=580.173.02-*",
        "linux-modules-nvidia-580-open-nvidia-hwe-24.04=6.17.0-1014.14+3",
        "linux-modules-nvidia-580-open-6.17.0-1014-nvidia=6.17.0-1014.14+3",
        "nvidia-firmware-580-580.173.02", "nvidia-modprobe", "cuda-toolkit-13-0"]
    assert sim.preinstalled("b") == kernel + ["nvidia-modprobe", "cuda-toolkit-13-0"]
    assert sim.node_options("b")["driver_version"] is None
    assert sim.preinstalled("c")[4] == "nvidia-driver-open=590.48.01-*"
    assert sim.preinstalled("c")[-3:] == ["cuda-toolkit-13-0", "cuda-toolkit-13-3", "nvidia-driver-pinning-580"]
    # a Spark reinstalled with plain Ubuntu: DKMS, no precompiled module, no nvidia-modprobe
    assert sim.preinstalled("d") == kernel + [
        "nvidia-driver-580-open=580.159.03-*", "nvidia-dkms-580-open=580.159.03-*", "nvidia-kernel-common-580=580.159.03-*",
        "nvidia-utils-580=580.159.03-*", "libnvidia-compute-580=580.159.03-*", "libnvidia-common-580=580.159.03-*",
        "nvidia-firmware-580-580.159.03", "cuda-toolkit-13-0"]
