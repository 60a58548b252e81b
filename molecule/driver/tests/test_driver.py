"""Live state of the molecule driver scenario's nodes after converge,
idempotence and the side effects (dist-upgrade with a kernel flavour update and
a reboot into it, a downgraded worker, a worker on the 590 branch, both
converged back with driver_enforce; NVIDIA's repo added on the worker by the
cuda role). spark-head, spark-worker and spark-bare are stock DGX OS nodes
(precompiled modules; the worker installed from Ubuntu's archive form, versions
580.x-0ubuntu0.24.04.1, the others from NVIDIA's, 580.x-1ubuntu1), spark-dkms a
Spark reinstalled with plain Ubuntu (DKMS).

Expected values: driver 580.173.02 (what the head shipped with; the default
driver_version "580" keeps it and installs it where no driver was), CUDA 13.0 as
the system default, 13.3 for the runtime.

Molecule's `check` step is not in this scenario's test sequence (it asserts nothing): check mode
is asserted once, site-wide, in the default scenario's verify (test_doctor.py, after doctor ran).
"""

import json
import re

import pytest

DRIVER = "580.173.02"
USERSPACE = ["nvidia-driver-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
             "libnvidia-compute-580", "libnvidia-common-580"]
KERNEL = "6.17.0-1026-nvidia"   # the flavour update side effect 1 installed (driver_kernel_updates: with_module) and booted
# the kernel flavour's packages, held and pinned with the driver (Ubuntu's linux-nvidia-6.17 names)
FLAVOUR = ["linux-nvidia-hwe-24.04", "linux-image-nvidia-hwe-24.04", "linux-headers-nvidia-hwe-24.04"]
RELEASES = ["linux-%s-%s" % (kind, rel) for kind in ("image", "modules", "headers")
            for rel in ("6.17.0-1014-nvidia", KERNEL)]
MODULES = ["linux-modules-nvidia-580-open-6.17.0-1014-nvidia", "linux-modules-nvidia-580-open-6.17.0-1026-nvidia"]


def dkms(host):
    return host.backend.get_hostname() == "spark-dkms"


def deb(host):
    """The driver's Debian version in the node's repository form (the worker: Ubuntu's archive)."""
    return DRIVER + ("-0ubuntu0.24.04.1" if host.backend.get_hostname() == "spark-worker" else "-1ubuntu1")


def pins(host):
    return USERSPACE + (["nvidia-dkms-580-open"] if dkms(host) else [])


def installed(host):
    out = host.check_output("dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\\n' 'nvidia-*' 'libnvidia-*' 'cuda-*' 'linux-modules-nvidia-*'")
    return {f[0]: f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[1][1] == "i"}


@pytest.mark.parametrize("name", USERSPACE)
def test_driver_package_is_at_the_pin(host, name):
    assert host.package(name).is_installed
    assert host.package(name).version == deb(host)


def test_kernel_side_of_the_profile(host):
    pkgs = installed(host)
    if dkms(host):
        assert pkgs["nvidia-dkms-580-open"] == deb(host)
        assert not [n for n in pkgs if n.startswith("linux-modules-nvidia-")]
        ko = host.file("/lib/modules/%s/updates/dkms/nvidia.ko" % KERNEL)
    else:
        assert "nvidia-dkms-580-open" not in pkgs and "nvidia-dkms-open" not in pkgs
        assert pkgs["linux-modules-nvidia-580-open-6.17.0-1014-nvidia"] == "6.17.0-1014.14+3"
        assert pkgs["linux-modules-nvidia-580-open-6.17.0-1026-nvidia"] == "6.17.0-1026.26+3"
        assert pkgs["linux-modules-nvidia-580-open-nvidia-hwe-24.04"] == "6.17.0-1026.26+3"
        ko = host.file("/lib/modules/%s/kernel/nvidia-580-open/nvidia.ko" % KERNEL)
    assert "version=%s\n" % DRIVER in ko.content_string
    assert host.file("/var/lib/spark-sim/proc/sys/kernel/osrelease").content_string == KERNEL + "\n"


def test_modprobe_and_firmware_keep_their_own_versions(host):
    pkgs = installed(host)
    held = host.check_output("apt-mark showhold").split()
    if not dkms(host):
        assert pkgs["nvidia-modprobe"] == "580.126.09-1ubuntu1"
        assert "nvidia-modprobe" not in held
    if host.backend.get_hostname() not in ("spark-worker", "spark-bare"):   # shipped with the driver: its firmware
        assert pkgs["nvidia-firmware-580-%s" % DRIVER] == deb(host)
    assert not [n for n in held if n.startswith("nvidia-firmware-")]


def test_no_other_driver_version_is_installed(host):
    pkgs = installed(host)
    driver_like = {n: v for n, v in pkgs.items() if re.match(r"^\d{3}\.\d+", v)
                   and not re.match(r"^(nvidia-modprobe|nvidia-firmware-|nvidia-driver-pinning-)", n)}
    assert set(driver_like.values()) == {deb(host)}, driver_like
    assert not [n for n in pkgs if n in ("nvidia-driver-open", "libnvidia-compute", "nvidia-utils")]


def test_driver_packages_are_held(host):
    held = host.check_output("apt-mark showhold").split()
    # the derived set: the userspace packages, the kernel side (DKMS, or the module packages with their flavour
    # metapackage) and the kernel flavour's own packages (held with the driver: driver_kernel_updates)
    assert sorted(held) == sorted(pins(host) + FLAVOUR + RELEASES
                                  + ([] if dkms(host) else MODULES + ["linux-modules-nvidia-580-open-nvidia-hwe-24.04"]))


def test_apt_prefers_the_pinned_version(host):
    policy = host.check_output("apt-cache policy nvidia-utils-580 libnvidia-compute-580")
    assert policy.count("Candidate: %s" % deb(host)) == 2
    assert re.search(r"^\s+(\*\*\* )?%s 1001$" % re.escape(deb(host)), policy, re.M), policy
    assert re.search(r"^\s+580\.178\.04-1ubuntu1 (500|1000)$", policy, re.M), policy  # newer 580.x is there, not chosen
    pref = host.file("/etc/apt/preferences.d/dgxspark-nvidia-driver")
    assert pref.mode == 0o644
    assert "Package: %s\n" % " ".join(sorted(pins(host))) in pref.content_string
    assert "Pin: version %s\n" % deb(host) in pref.content_string   # the exact Debian version, not 580.173.02-*
    if not dkms(host):
        meta = host.check_output("apt-cache policy linux-modules-nvidia-580-open-nvidia-hwe-24.04")
        assert "Candidate: 6.17.0-1026.26+3" in meta, meta   # +4 (580.178.04's build) is newer, not chosen
        assert re.search(r"^\s+6\.17\.0-1026\.26\+4 500$", meta, re.M), meta


def test_nvidia_pinning_package_is_installed(host):
    assert host.package("nvidia-driver-pinning-580").is_installed


def test_dist_upgrade_has_nothing_to_move(host):
    out = host.check_output("LC_ALL=C apt-get --simulate dist-upgrade")
    assert not re.search(r"^(Inst|Remv) (nvidia|libnvidia|cuda)", out, re.M), out


def test_unattended_upgrades_blacklist(host):
    conf = host.file("/etc/apt/apt.conf.d/51dgxspark-nvidia-driver")
    assert conf.mode == 0o644
    # apt itself parses the file: the blacklist is what unattended-upgrades reads
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for prefix in ("nvidia-", "libnvidia-", "cuda-"):
        assert 'Unattended-Upgrade::Package-Blacklist:: "%s";' % prefix in dump, dump


def test_loaded_module_matches_the_installed_driver(host):
    proc = host.file("/var/lib/spark-sim/proc/driver/nvidia/version").content_string
    assert proc.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  %s  " % DRIVER)
    assert host.file("/var/lib/spark-sim/driver-userspace-version").content_string.strip() == DRIVER
    smi = host.run("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader")
    assert smi.rc == 0 and smi.stdout.strip() == "NVIDIA GB10, %s" % DRIVER


def test_reboots_only_for_the_kernel_update_and_each_driver_change(host):
    state = json.loads(host.file("/var/lib/spark-sim/state.json").content_string)
    # every node: the reboot into the new kernel (side effect 1) and the one after unattended-upgrades on the
    # advanced archive (side effect 7); spark-bare also the install (converge); the worker: install (converge),
    # downgrade, enforce, 590, enforce = 7 reboots after its first boot
    expected = {"spark-worker": 8, "spark-bare": 4}.get(host.backend.get_hostname(), 3)
    assert state["boot"]["count"] == expected
    assert state["kernel"]["release"] == KERNEL


@pytest.mark.parametrize("link,name", [("/usr/local/cuda", "cuda"), ("/usr/local/cuda-13", "cuda-13")])
def test_system_cuda_stays_on_13_0(host, link, name):
    assert host.file(link).linked_to == "/usr/local/cuda-13.0"
    query = host.check_output("update-alternatives --query %s" % name)
    assert "Status: manual" in query
    assert "Value: /usr/local/cuda-13.0" in query
    assert re.search(r"^Alternative: /usr/local/cuda-13\.3\nPriority: 133$", query, re.M)  # 13.3 would win in auto mode


@pytest.mark.parametrize("release,version", [("13.0", "13.0.88"), ("13.3", "13.3.73")])
def test_each_toolkit_answers_with_its_own_nvcc(host, release, version):
    out = host.check_output("/usr/local/cuda-%s/bin/nvcc --version" % release)
    assert "Cuda compilation tools, release %s, V%s" % (release, version) in out
    assert host.package("cuda-toolkit-%s" % release.replace(".", "-")).is_installed


def test_default_nvcc_is_13_0(host):
    assert "release 13.0, V13.0.88" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_cuda_13_0_untouched(host):
    assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"
    assert host.package("cuda-nvcc-13-0").version == "13.0.88-1"


def test_no_cuda_metapackage_with_a_driver(host):
    for name in ("cuda-13-3", "cuda-runtime-13-3"):
        assert not host.package(name).is_installed


def test_runtime_environment_file(host):
    env = host.file("/etc/dgxspark/cuda.env")
    assert env.mode == 0o644
    lines = [line for line in env.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == ["CUDA_HOME=/usr/local/cuda-13.3", "LD_LIBRARY_PATH=/usr/local/cuda-13.3/lib64",
                     "PATH=/usr/local/cuda-13.3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]


def test_nvidia_repo_where_it_was_added(host):
    sources = host.file("/etc/apt/sources.list.d/cuda.sources")
    if host.backend.get_hostname() != "spark-worker":
        assert not sources.exists  # DGX OS-like: the preconfigured repo, nothing added
        assert host.file("/etc/apt/sources.list.d/nvidia-sim.sources").exists
        return
    text = sources.content_string
    assert "URIs: file:/var/lib/spark-sim/apt/" in text
    assert "Suites: /" in text
    assert "Signed-By: /etc/apt/keyrings/cuda-archive-keyring.asc" in text
    fpr = host.file("/var/lib/spark-sim/apt/spark-sim.fingerprint").content_string.strip()
    keys = host.check_output("gpg --batch --with-colons --show-keys /etc/apt/keyrings/cuda-archive-keyring.asc")
    assert "fpr:::::::::%s:" % fpr in keys


def test_kernel_flavour_is_held_pinned_and_blacklisted(host):
    held = host.check_output("apt-mark showhold").split()
    assert not set(FLAVOUR + RELEASES) - set(held), held
    assert "linux-modules-nvidia-580-open-nvidia-hwe-24.04" in held or dkms(host)
    pref = host.file("/etc/apt/preferences.d/dgxspark-kernel")
    assert pref.mode == 0o644
    assert re.search(r"^Package: .*linux-image-nvidia-hwe-24\.04.*\nPin: version 6\.17\.0-1026\.26\nPin-Priority: 1001$",
                     pref.content_string, re.M), pref.content_string
    policy = host.check_output("apt-cache policy linux-image-nvidia-hwe-24.04")
    assert "Candidate: 6.17.0-1026.26" in policy, policy
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for regexp in (r"linux-(.+-)?nvidia-hwe-24\.04$", r"linux-.+-[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-nvidia$"):
        assert 'Unattended-Upgrade::Package-Blacklist:: "%s";' % regexp in dump, dump
    assert '"linux-";' not in dump and '"linux-";' not in dump.replace(" ", "")


def test_dist_upgrade_leaves_the_kernel(host):
    out = host.check_output("LC_ALL=C apt-get --simulate dist-upgrade")
    assert not re.search(r"^(Inst|Remv) linux-", out, re.M), out
