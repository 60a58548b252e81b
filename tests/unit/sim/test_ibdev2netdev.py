"""The ibdev2netdev stand-in against real captures (tests/fixtures/captures/ibdev2netdev) and the script's rules.

Golden tests: each capture's hardware (RDMA devices, PCI functions, VPD,
netdevs and their carrier) is described in the state schema, written with
rdma.write_sysfs, and the output must equal the capture body byte for byte;
captures copied out of Windows-edited markdown get CRLF line ends applied to
the stand-in's output first (their '# note:' says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from captures import capture_body, captures, crlf, hca, ib_port, rdma, roce_port, run_tool, write_tree

CX4_LX = {"id": "CX4121A - ConnectX-4 LX SFP28"}
CX5 = {"id": "CX515A - ConnectX-5 QSFP28",
       "fields": [["PN", "MCX515A-CCAT"], ["EC", "A7"], ["V2", "MCX515A-CCAT".ljust(23)],
                  ["SN", "MT2140X04570".ljust(24)]]}
# The VPD ID string of this card is padded with 91 spaces, which the -v line keeps.
CX6_VPI = {"id": "ConnectX-6 VPI adapter card, HDR IB (200Gb/s) and 200GbE, single-port QSFP56, "
                 "Socket Direct" + " " * 91,
           "fields": [["PN", "MCX654105A-HCAT"], ["EC", "A4"], ["V2", "MCX654105A-HCAT".ljust(23)],
                      ["SN", "MT2118X06251".ljust(24)]]}


def _cx4_vpd(serial: str) -> dict[str, Any]:
    """A ConnectX-4 Lx VPD without a V2 field: the 4th ``strings`` line is the serial number."""
    return {**CX4_LX, "fields": [["PN", "CX4121A"], ["EC", "A6"], ["SN", serial.ljust(24)]]}


def _spark(up: list[str]) -> list[dict[str, Any]]:
    rails = [{"netdev": netdev, "ipv4": "192.168.100.%d" % (10 + i)} for i, netdev in enumerate(up)]
    return rdma.default_hcas("spark-1", rails)


def _mixed(ib_states: tuple[bool, bool, bool], roce_up: tuple[bool, ...], vf_netdevs: tuple[str, str],
           vf_infiniband: bool) -> list[dict[str, Any]]:
    """The CX-4 Lx / CX-5 / CX-6 VPI host of captures 04-06 (mlx5_6, mlx5_7: SR-IOV VFs)."""
    netdevs = ["ens4f0", "ens4f1", "ens6", "ens14f0", "ens14f1"]
    hcas = [hca("mlx5_%d" % i, [roce_port(netdev, "08:c0:eb:3b:34:%02x" % (0x90 + i), up=up)])
            for i, (netdev, up) in enumerate(zip(netdevs, roce_up))]
    hcas.append(hca("mlx5_5", [ib_port(["fe80:0000:0000:0000:08c0:eb03:00ea:50de"], "ib0", up=ib_states[0])]))
    for i, netdev in enumerate(vf_netdevs):
        if vf_infiniband:
            port = ib_port(["fe80:0000:0000:0000:0000:0000:0000:0c06"], netdev, up=ib_states[1 + i])
        else:
            port = roce_port(netdev, "da:ea:31:2d:ce:%02x" % (0x8c + i), up=ib_states[1 + i])
        hcas.append(hca("mlx5_%d" % (6 + i), [port]))
    return hcas


def _hw_05() -> list[dict[str, Any]]:
    hcas = _mixed((True, False, False), (False, False, True, True, False), ("ens6f1", "ens6f2"), False)
    cards = [  # pci, device id, fw, vpd
        ("0000:31:00.0", "0x1015", "14.27.1016", _cx4_vpd("MT2138K10121")),
        ("0000:31:00.1", "0x1015", "14.27.1016", _cx4_vpd("MT2138K10121")),
        ("0000:4b:00.0", "0x1017", "16.27.1016", CX5),
        ("0000:98:00.0", "0x1015", "14.27.1016", _cx4_vpd("MT2138K10336")),
        ("0000:98:00.1", "0x1015", "14.27.1016", _cx4_vpd("MT2138K10336")),
        ("0000:b1:00.0", "0x101b", "20.30.1004", CX6_VPI),
        ("0000:4b:00.1", "0x1018", "16.27.1016", None),
        ("0000:4b:00.2", "0x1018", "16.27.1016", None),
    ]
    for device, (pci, device_id, fw, vpd) in zip(hcas, cards):
        device.update(pci=pci, pci_device_id=device_id, fw=fw, vpd=vpd)
    return hcas


def _hw_07() -> list[dict[str, Any]]:
    return [hca("mlx5_0", [roce_port("enp1s0f0", "b8:59:9f:01:02:00")]),
            hca("mlx5_1", [roce_port("enp1s0f1", "b8:59:9f:01:02:01")]),
            hca("mlx5_2", [ib_port(["fe80:0000:0000:0000:b859:9f03:0001:0210"], "ibp129s0")]),
            hca("mlx5_3", [roce_port("enp193s0", "b8:59:9f:01:02:20")])]


def _with_pci(hcas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every device its own PCI function (ibdev2netdev finds netdevs by PCI vendor)."""
    for number, device in enumerate(hcas):
        device.setdefault("pci", "0000:%02x:00.0" % (0x31 + number))
    return hcas


# capture file -> (hardware, locale, damage applied to the stand-in's output)
CASES: dict[str, tuple[Callable[[], list[dict[str, Any]]], str, Callable[[str], str]]] = {
    # Capital-P names first: the playbook's shell ran with C collation.
    "01-dgx-spark-two-sparks-f1-up.txt": (lambda: _spark(["enp1s0f1np1", "enP2p1s0f1np1"]), "C", str),
    # Lower-case names first: an en_US.UTF-8 shell (DGX OS default).
    "02-dgx-spark-three-sparks-all-up.txt": (
        lambda: _spark(["enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1"]), "en_US.UTF-8", str),
    "03-dgx-spark-f0-up-spark-5c2d.txt": (lambda: _spark(["enp1s0f0np0", "enP2p1s0f0np0"]), "en_US.UTF-8", str),
    "04-mixed-cx4-cx5-cx6-ib0-vfs.txt": (
        lambda: _with_pci(_mixed((True, False, False), (False, False, True, True, False),
                                 ("ens6f1", "ens6f2"), False)), "C", crlf),
    "05-verbose-v-flag.txt": (_hw_05, "C", crlf),
    # mlx5_6 and mlx5_7 are IB VFs with the same port GUID, so both resolve to ib1.
    "06-two-ibdevs-same-netdev-ib1.txt": (
        lambda: _with_pci(_mixed((False, False, False), (False, False, True, True, False),
                                 ("ib1", "ib1"), True)), "C", crlf),
    "07-ib-netdev-ibp129s0.txt": (lambda: _with_pci(_hw_07()), "C", crlf),
    "08-two-port-cx6dx-np-names.txt": (
        lambda: _with_pci([hca("mlx5_0", [roce_port("enp61s0f0np0", "c4:70:bd:aa:1f:c8", up=False)]),
                           hca("mlx5_1", [roce_port("enp61s0f1np1", "c4:70:bd:aa:1f:c9")])]), "C", crlf),
}


@pytest.mark.parametrize("capture", captures("ibdev2netdev"), ids=lambda path: path.name)
def test_capture_is_reproduced(tmp_path: Path, capture: Path) -> None:
    assert capture.name in CASES, "describe the hardware of %s in CASES" % capture.name
    hardware, collation, damage = CASES[capture.name]
    args = ["-v"] if "verbose" in capture.name else []
    result = run_tool("ibdev2netdev", *args, sysfs=write_tree(tmp_path, hardware()), env={"LC_ALL": collation})
    assert (result.returncode, result.stderr) == (0, b"")
    assert damage(result.stdout.decode()) == capture_body(capture)


@pytest.fixture
def spark_root(tmp_path: Path) -> Path:
    return write_tree(tmp_path, _spark(["enp1s0f1np1", "enP2p1s0f1np1"]))


def test_verbose_spark_line_shows_pci_part_and_padded_state(spark_root: Path) -> None:
    lines = run_tool("ibdev2netdev", "-v", sysfs=spark_root, env={"LC_ALL": "C"}).stdout.decode().splitlines()
    assert lines[-1] == ("0000:01:00.1 rocep1s0f1 (MT4129 - %s) %s fw %s port 1 (ACTIVE) ==> enp1s0f1np1 (Up)"
                         % (rdma.SPARK_PART, rdma.SPARK_VPD_ID, rdma.SPARK_FW))
    assert " port 1 (DOWN  ) ==> enP2p1s0f0np0 (Down)" in lines[0]


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["-h", "extra"]])
def test_help(spark_root: Path, args: list[str]) -> None:
    result = run_tool("ibdev2netdev", *args, sysfs=spark_root)
    assert result.returncode == 0
    assert result.stdout == (b"ibdev2netdev <options>\n-h, --help                print help message\n"
                             b"-v, --verbose             print more info\n")


@pytest.mark.parametrize("args", [["-x"], ["--verbose"], ["-v", "-v"], ["mlx5_0"]])
def test_anything_else_prints_usage_and_fails(spark_root: Path, args: list[str]) -> None:
    result = run_tool("ibdev2netdev", *args, sysfs=spark_root)
    assert result.returncode == 255
    assert result.stdout.startswith(b"ibdev2netdev <options>\n")


def test_stopped_driver_is_a_silent_255(tmp_path: Path) -> None:
    result = run_tool("ibdev2netdev", sysfs=tmp_path / "nothing")
    assert (result.returncode, result.stdout, result.stderr) == (255, b"", b"")


def test_carrier_drives_up_and_down(tmp_path: Path) -> None:
    hcas = _spark(["enp1s0f1np1"])
    root = tmp_path / "sys"
    rdma.write_sysfs({"hostname": "spark-head", "hcas": hcas}, str(root))
    assert b"rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)" in run_tool("ibdev2netdev", sysfs=root).stdout
    hcas[1]["ports"][0]["state"] = "down"
    rdma.write_sysfs({"hostname": "spark-head", "hcas": hcas}, str(root))
    assert b"rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)" in run_tool("ibdev2netdev", sysfs=root).stdout
