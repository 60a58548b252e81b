"""sim/apt-repo/build-repo: the stand-in NVIDIA repository holds the real
package names and versions, the dependencies that make the traps real (exact
= deps of the driver metapackage, cuda-13-3 -> cuda-drivers, the 590 names
replacing the -580 ones), the alternatives registration of the toolkits and
nvcc stand-ins answering like the real ones. Built unsigned into a temporary
directory with the host's dpkg-deb."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "sim" / "apt-repo" / "build-repo"

pytestmark = pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb is not installed")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("apt") / "repo"
    sources = out.parent / "nvidia-sim.sources"
    subprocess.run([sys.executable, str(BUILD), str(out), "--no-sign", "--arch", "arm64", "--sources", str(sources)],
                   check=True, capture_output=True)
    stanzas = {}
    for block in (out / "Packages").read_text().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        stanzas[(fields["Package"], fields["Version"])] = fields
    return out, stanzas, sources.read_text()


def test_driver_versions_and_names(repo):
    _out, stanzas, _src = repo
    versions = sorted(v for (name, v) in stanzas if name == "libnvidia-compute-580")
    assert versions == ["580.159.03-1ubuntu1", "580.173.02-1ubuntu1", "580.178.04-1ubuntu1", "580.95.05-1ubuntu1"]
    assert ("libnvidia-compute", "590.48.01-1ubuntu1") in stanzas
    assert ("nvidia-driver-pinning-580", "580-1") in stanzas
    meta = stanzas[("nvidia-driver-580-open", "580.173.02-1ubuntu1")]
    assert "nvidia-utils-580 (= 580.173.02-1ubuntu1)" in meta["Depends"]
    assert "libnvidia-compute-580 (= 580.173.02-1ubuntu1)" in meta["Depends"]
    assert stanzas[("libnvidia-compute", "590.48.01-1ubuntu1")]["Conflicts"] == "libnvidia-compute-580"
    assert stanzas[("libnvidia-common-580", "580.173.02-1ubuntu1")]["Architecture"] == "all"
    assert meta["Architecture"] == "arm64"


def test_cuda_metapackage_pulls_a_driver_the_toolkit_does_not(repo):
    _out, stanzas, _src = repo
    assert "cuda-runtime-13-3" in stanzas[("cuda-13-3", "13.3.1-1")]["Depends"]
    assert "cuda-drivers" in stanzas[("cuda-runtime-13-3", "13.3.1-1")]["Depends"]
    assert stanzas[("cuda-drivers", "590.48.01-1ubuntu1")]["Depends"] == "nvidia-driver-open (= 590.48.01-1ubuntu1)"
    for release, version in (("13-0", "13.0.2-1"), ("13-3", "13.3.1-1")):
        depends = stanzas[("cuda-toolkit-%s" % release, version)]["Depends"]
        assert "driver" not in depends and "nvidia" not in depends


def test_toolkit_registers_alternatives_at_its_version(repo, tmp_path):
    out, _stanzas, _src = repo
    deb = out / "cuda-toolkit-13-3-config-common_13.3.73-1_all.deb"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "ctl")], check=True)
    postinst = (tmp_path / "ctl" / "postinst").read_text()
    assert "update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-13.3 133" in postinst
    assert "update-alternatives --install /usr/local/cuda-13 cuda-13 /usr/local/cuda-13.3 133" in postinst


@pytest.mark.parametrize("release,line", [
    ("13-0", "Cuda compilation tools, release 13.0, V13.0.88"),
    ("13-3", "Cuda compilation tools, release 13.3, V13.3.73"),
])
def test_nvcc_answers_like_the_real_one(repo, tmp_path, release, line):
    out, _stanzas, _src = repo
    deb = next(out.glob("cuda-nvcc-%s_*.deb" % release))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    nvcc = tmp_path / "usr" / "local" / ("cuda-" + release.replace("-", ".")) / "bin" / "nvcc"
    text = subprocess.run([str(nvcc), "--version"], check=True, capture_output=True, text=True).stdout.splitlines()
    assert text[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
    assert text[3] == line
    assert text[4].startswith("Build cuda_%s.r%s/compiler." % ((release.replace("-", "."),) * 2))


def test_driver_postinst_records_the_userspace_version(repo, tmp_path):
    out, _stanzas, _src = repo
    subprocess.run(["dpkg-deb", "-e", str(out / "libnvidia-compute-580_580.173.02-1ubuntu1_arm64.deb"), str(tmp_path / "c")],
                   check=True)
    assert 'echo "580.173.02" > /var/lib/spark-sim/driver-userspace-version' in (tmp_path / "c" / "postinst").read_text()


def test_unsigned_sources_file(repo):
    out, _stanzas, sources = repo
    assert "URIs: file:%s/" % out in sources
    assert "Suites: ./" in sources and "Trusted: yes" in sources
    assert "SHA256:" in (out / "Release").read_text()


def test_stock_dgx_os_package_set(repo):
    """The precompiled module per kernel (one build per driver, >= its kernel-common as NVIDIA's DGX repo writes it),
    the flavour metapackages, the firmware and exact pinning packages, nvidia-modprobe at a version of its own."""
    _out, stanzas, _src = repo
    mod = stanzas[("linux-modules-nvidia-580-open-6.17.0-1026-nvidia", "6.17.0-1026.26+3")]
    assert mod["Depends"] == "nvidia-kernel-common-580 (>= 580.173.02), linux-image-6.17.0-1026-nvidia"
    meta = stanzas[("linux-modules-nvidia-580-open-nvidia-hwe-24.04", "6.17.0-1014.14+3")]
    assert meta["Depends"] == ("linux-modules-nvidia-580-open-6.17.0-1014-nvidia (= 6.17.0-1014.14+3), "
                               "nvidia-kernel-common-580 (>= 580.173.02)")
    assert stanzas[("linux-image-nvidia-hwe-24.04", "6.17.0-1026.26")]["Depends"] == \
        "linux-image-6.17.0-1026-nvidia (= 6.17.0-1026.26)"
    driver = stanzas[("nvidia-driver-580-open", "580.173.02-1ubuntu1")]["Depends"]
    assert driver.startswith("linux-modules-nvidia-580-open-nvidia-hwe-24.04 | nvidia-dkms-580-open (= 580.173.02-1ubuntu1), ")
    assert ("nvidia-firmware-580-580.173.02", "580.173.02-1ubuntu1") in stanzas
    assert ("nvidia-driver-pinning-580.173.02", "580.173.02-1") in stanzas
    assert [v for (n, v) in stanzas if n == "nvidia-modprobe"] == ["580.126.09-1ubuntu1"]
    # a module build never names its driver with = (no real one does; the driver metapackage and nvidia-dkms do)
    assert not [f for (n, _v), f in stanzas.items() if n.startswith("linux-modules-nvidia-") and "kernel-common-580 (=" in f["Depends"]]


def test_ubuntu_archive_form(repo):
    """OUTDIR/ubuntu: Ubuntu's version format and the <=/>= pair of linux-restricted-modules; module_builds reads it."""
    out, _stanzas, _src = repo
    text = (out / "ubuntu" / "Packages").read_text()
    ubuntu = {}
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        ubuntu[(fields["Package"], fields["Version"])] = fields
    assert ("libnvidia-compute-580", "580.159.03-0ubuntu0.24.04.1") in ubuntu
    mod = ubuntu[("linux-modules-nvidia-580-open-6.17.0-1014-nvidia", "6.17.0-1014.14+2")]
    assert mod["Depends"] == ("linux-image-6.17.0-1014-nvidia, nvidia-kernel-common-580 (<= 580.159.03-1), "
                              "nvidia-kernel-common-580 (>= 580.159.03)")
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.dgxspark.cluster.plugins.module_utils import nvidia_stack as ns
    builds = ns.module_builds(text, "580.159.03-0ubuntu0.24.04.1")
    assert builds["linux-modules-nvidia-580-open-6.17.0-1014-nvidia"] == ["6.17.0-1014.14+2"]
    assert builds["linux-modules-nvidia-580-open-nvidia-hwe-24.04"] == ["6.17.0-1014.14+2", "6.17.0-1026.26+2"]
    assert "Origin: spark-sim Ubuntu" in (out / "ubuntu" / "Release").read_text()


def test_precompiled_module_path_and_dkms_build(repo, tmp_path):
    out, _stanzas, _src = repo
    deb = out / "linux-modules-nvidia-580-open-6.17.0-1014-nvidia_6.17.0-1014.14+3_arm64.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True).stdout
    assert "./lib/modules/6.17.0-1014-nvidia/kernel/nvidia-580-open/nvidia.ko" in listing
    dkms = out / "nvidia-dkms-580-open_580.173.02-1ubuntu1_arm64.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(dkms)], check=True, capture_output=True, text=True).stdout
    assert "./etc/kernel/postinst.d/dkms" in listing
    subprocess.run(["dpkg-deb", "-x", str(dkms), str(tmp_path)], check=True)
    hook = (tmp_path / "etc" / "kernel" / "postinst.d" / "dkms").read_text()
    assert "/lib/modules/$kernel/updates/dkms/nvidia.ko" in hook and "version=580.173.02" in hook


def _read_stanzas(path):
    found = {}
    for block in path.read_text().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        found[(fields["Package"], fields["Version"])] = fields
    return found


def test_kernel_flavour_packages(repo):
    """The flavour as Ubuntu's linux-nvidia-6.17 sources name it: image (Depends its modules), modules, headers per
    release; the image, headers and linux-nvidia-hwe-24.04 metapackages (= on their kernel's packages)."""
    _out, stanzas, _src = repo
    assert stanzas[("linux-image-6.17.0-1014-nvidia", "6.17.0-1014.14")]["Depends"] == \
        "linux-modules-6.17.0-1014-nvidia (= 6.17.0-1014.14)"
    assert ("linux-modules-6.17.0-1026-nvidia", "6.17.0-1026.26") in stanzas
    assert stanzas[("linux-headers-nvidia-hwe-24.04", "6.17.0-1026.26")]["Depends"] == \
        "linux-headers-6.17.0-1026-nvidia (= 6.17.0-1026.26)"
    assert stanzas[("linux-nvidia-hwe-24.04", "6.17.0-1014.14")]["Depends"] == \
        "linux-image-nvidia-hwe-24.04 (= 6.17.0-1014.14), linux-headers-nvidia-hwe-24.04 (= 6.17.0-1014.14)"


@pytest.mark.parametrize("form, rev", [("", "-1ubuntu1"), ("ubuntu", "-0ubuntu0.24.04.1")])
def test_advanced_archive(repo, form, rev):
    """OUTDIR[/ubuntu]/advanced: a newer kernel whose module builds need the newest point release; the superseded
    point releases and older kernels gone (worst case); signed like the others (a Release of its own)."""
    out, _stanzas, _src = repo
    base = out / form if form else out
    adv = _read_stanzas(base / "advanced" / "Packages")
    assert sorted(v for (n, v) in adv if n == "libnvidia-compute-580") == ["580.178.04" + rev]
    assert sorted(v for (n, v) in adv if n == "linux-image-nvidia-hwe-24.04") == ["6.17.0-1035.35"]
    assert sorted(v for (n, v) in adv if n == "linux-modules-nvidia-580-open-6.17.0-1035-nvidia") == ["6.17.0-1035.35+4"]
    assert not [n for (n, _v) in adv if "6.17.0-1014" in n or "6.17.0-1026" in n]
    assert (base / "advanced" / "Release").read_text().startswith("Origin: spark-sim ")
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.dgxspark.cluster.plugins.module_utils import nvidia_stack as ns
    text = (base / "advanced" / "Packages").read_text()
    assert ns.module_builds(text, "580.173.02" + rev) == {}
    assert ns.module_builds(text, "580.178.04" + rev)["linux-modules-nvidia-580-open-6.17.0-1035-nvidia"] == \
        ["6.17.0-1035.35+4"]
