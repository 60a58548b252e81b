"""The show_gids stand-in against real captures (tests/fixtures/captures/show_gids) and the script's rules.

Golden tests: each capture's hardware is described in the sim's state schema
(RDMA devices, ports, GID tables), written out with rdma.write_sysfs, and the
stand-in's output must equal the capture body byte for byte. Where a paste
damaged the capture (see its '# note:'), the same damage is applied to the
stand-in's output first, and the test names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from captures import (capture_body, captures, comment_out, crlf, expand_tabs, gid, hca, ib_port,
                      rdma, roce_port, run_tool, strip_trailing_blanks, write_tree)


def _pasted(text: str) -> str:
    """Editor paste: TABs expanded at 8 columns; the trailing TAB of rows without DEV trimmed."""
    return strip_trailing_blanks(expand_tabs(text))


def _bnxt_port() -> dict[str, Any]:
    """bnxt_re0 port 1: three netdevs (bnxt_roce and its VLANs .43/.45) in one GID table."""
    link_local = "fe80:0000:0000:0000:020a:f7ff:fee3:6e32"
    rows = [(0, link_local, "bnxt_roce"), (2, link_local, "bnxt_roce.45"), (4, link_local, "bnxt_roce.43"),
            (6, rdma.ipv4_gid("172.31.40.187"), "bnxt_roce"), (8, rdma.ipv4_gid("172.31.45.187"), "bnxt_roce.45"),
            (10, rdma.ipv4_gid("172.31.43.187"), "bnxt_roce.43")]
    table = []
    for index, value, ndev in rows:
        table += [gid(index, value, ndev), gid(index + 1, value, ndev, v2=True)]
    return {"port": 1, "netdev": "bnxt_roce", "link_layer": "Ethernet", "state": "up",
            "mac": "00:0a:f7:e3:6e:32", "gids": table}


def _hw_01() -> list[dict[str, Any]]:
    return [hca("mlx5_0", [roce_port("rdma0", "08:c0:eb:21:03:da", ["192.168.211.242"])])]


def _hw_02() -> list[dict[str, Any]]:
    return [
        hca("mlx5_5", [ib_port(["fe80:0000:0000:0000:08c0:eb03:00ea:50de"])]),
        hca("mlx5_0", [roce_port("ens4f0", "08:c0:eb:3b:34:90")]),
        hca("mlx5_1", [roce_port("ens4f1", "08:c0:eb:3b:34:91", ["10.16.242.57"])]),
        hca("mlx5_2", [roce_port("ens6", "08:c0:eb:da:e2:ba", ["172.17.242.57"])]),
        hca("mlx5_3", [roce_port("ens14f0", "08:c0:eb:3b:34:94", ["192.168.242.57"])]),
        hca("mlx5_4", [roce_port("ens14f1", "08:c0:eb:3b:34:95", up=False)]),
    ]


def _hw_03() -> list[dict[str, Any]]:
    return [
        hca("mlx5_0", [roce_port("ens4f0", "08:c0:eb:40:8d:f2")]),
        hca("mlx5_1", [roce_port("ens4f1", "08:c0:eb:40:8d:f3")]),
        hca("mlx5_2", [roce_port("ens6", "08:c0:eb:da:e2:ca", ["172.17.242.56"])]),
        hca("mlx5_3", [roce_port("ens14f0", "08:c0:eb:3b:35:3c", ["192.168.242.56"])]),
        hca("mlx5_4", [roce_port("ens14f1", "08:c0:eb:3b:35:3d")]),
        hca("mlx5_5", [ib_port(["fe80:0000:0000:0000:08c0:eb03:00b6:a0b4"])]),
        hca("mlx5_6", [roce_port("ens6f1", "da:ea:31:2d:ce:8c", up=False)]),
        hca("mlx5_7", [roce_port("ens6f2", "f6:36:ff:68:68:fc", up=False)]),
    ]


def _hw_04() -> list[dict[str, Any]]:
    return [
        hca("mlx5_0", [roce_port("enp61s0f0np0", "c4:70:bd:aa:1f:c8", up=False)]),
        hca("mlx5_1", [roce_port("enp61s0f1np1", "c4:70:bd:aa:1f:c9",
                                 ["10.22.116.221", "10.22.116.222", "10.22.116.223"])]),
    ]


def _hw_05() -> list[dict[str, Any]]:
    return [hca("mlx5_0", [ib_port(["fe80:0000:0000:0000:ec0d:9a03:00ca:2f4c"])]),
            hca("mlx5_1", [ib_port(["fe80:0000:0000:0000:ec0d:9a03:0078:6376"])])]


def _hw_06() -> list[dict[str, Any]]:
    return [
        hca("mlx5_0", [ib_port(["fe80:0000:0000:0000:506b:4b03:00f3:8a38"])]),
        hca("hfi1_0", [ib_port(["fe80:0000:0000:0000:0011:7501:0109:6c60",
                                "fe80:0000:0000:0000:0006:6a00:0000:0005"])]),
        hca("cxgb4_0", [ib_port(["0007:433b:f5b0:0000:0000:0000:0000:0000"], link_layer="Ethernet"),
                        ib_port(["0007:433b:f5b8:0000:0000:0000:0000:0000"], number=2, link_layer="Ethernet")],
            node_type=4),
        hca("bnxt_re1", [roce_port("lom_2", "00:0a:f7:e3:6e:33")]),
        hca("bnxt_re0", [_bnxt_port()]),
    ]


def _hw_15() -> list[dict[str, Any]]:
    return [hca("mlx5_0", [roce_port("ens11f0", "24:8a:07:b1:bc:04")]),
            hca("mlx5_1", [ib_port(["fe80:0000:0000:0000:248a:0703:00b1:bc05"], up=False)])]


def _hw_16() -> list[dict[str, Any]]:
    return [hca("mlx5_3", [roce_port("net1", "0e:b0:10:34:0a:ad", ["192.168.10.2"])])]


def _tokens(text: str) -> list[str]:
    return text.split()


# capture file -> (hardware, damage applied to the stand-in output, comparison)
CASES: dict[str, tuple[Callable[[], list[dict[str, Any]]], Callable[[str], str], str]] = {
    "01-mlx5-rdma0-single-tabs.txt": (_hw_01, lambda text: text, "exact"),
    # TABs expanded, trailing TAB trimmed, CRLF line ends (see the capture's notes).
    "02-multi-dev-mixed-roce-ib-17.txt": (_hw_02, lambda text: crlf(_pasted(text)), "exact"),
    "03-multi-dev-19-ib-and-vf.txt": (_hw_03, lambda text: crlf(_pasted(text)), "exact"),
    "04-multiple-ipv4-same-netdev.txt": (_hw_04, lambda text: crlf(_pasted(text)), "exact"),
    # TABs expanded, then every line commented out with '# '.
    "05-infiniband-only-commented.txt": (_hw_05, lambda text: comment_out(_pasted(text)), "exact"),
    # A mail client turned TABs into NBSP/space runs and soft-wrapped rows (and the user ran a
    # circulating copy of the script with one space after the IPv4): no transformation
    # reproduces that byte for byte, so the whitespace-separated token streams are compared.
    "06-bnxt-vlan-multivendor-email-wrapped.txt": (_hw_06, lambda text: text, "tokens"),
    "15-roce-plus-ib-port-no-ipv4.txt": (_hw_15, _pasted, "exact"),
    "16-openshift-sriov-pod-net1-tabs.txt": (_hw_16, lambda text: text, "exact"),
}


@pytest.mark.parametrize("capture", captures("show_gids"), ids=lambda path: path.name)
def test_capture_is_reproduced(tmp_path: Path, capture: Path) -> None:
    assert capture.name in CASES, "describe the hardware of %s in CASES" % capture.name
    hardware, damage, comparison = CASES[capture.name]
    result = run_tool("show_gids", sysfs=write_tree(tmp_path, hardware()), env={"LC_ALL": "C"})
    assert result.returncode == 0
    assert result.stderr == b""
    produced = damage(result.stdout.decode())
    expected = capture_body(capture)
    if comparison == "tokens":
        assert _tokens(produced) == _tokens(expected)
    else:
        assert produced == expected


def _spark_tree(tmp_path: Path, **rail: Any) -> Path:
    hcas = rdma.default_hcas("spark-head", [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1", **rail}])
    return write_tree(tmp_path, hcas)


def test_only_the_first_argument_selects_devices(tmp_path: Path) -> None:
    root = _spark_tree(tmp_path)
    result = run_tool("show_gids", "rocep1s0f1", "rocep1s0f0", sysfs=root)
    lines = result.stdout.decode().splitlines()
    assert {line.split("\t")[0] for line in lines[2:-1]} == {"rocep1s0f1"}
    assert lines[-1] == "n_gids_found=4"
    assert "192.168.100.1  \tv2\tenp1s0f1np1" in lines[-2]


def test_an_unknown_device_is_an_ls_error_and_no_rows(tmp_path: Path) -> None:
    result = run_tool("show_gids", "mlx5_9", sysfs=_spark_tree(tmp_path))
    assert result.returncode == 0
    assert result.stdout.decode().splitlines()[2:] == ["n_gids_found=0"]
    assert result.stderr == b"ls: cannot access '/sys/class/infiniband/mlx5_9/ports/': No such file or directory\n"


def test_no_rdma_device_at_all(tmp_path: Path) -> None:
    result = run_tool("show_gids", sysfs=tmp_path / "empty")
    assert result.stdout.decode().splitlines()[2:] == ["n_gids_found=0"]
    assert result.stderr == b"ls: cannot access '/sys/class/infiniband/': No such file or directory\n"


def test_indices_sort_as_text_and_zero_link_local_is_skipped(tmp_path: Path) -> None:
    port = roce_port("enp1s0f1np1", "4c:bb:47:00:00:01")
    port["gids"] += [gid(10, rdma.ipv4_gid("10.0.0.1"), "enp1s0f1np1"),
                     gid(11, rdma.ipv4_gid("10.0.0.1"), "enp1s0f1np1", v2=True),
                     gid(2, "fe80:0000:0000:0000:0000:0000:0000:0000", "enp1s0f1np1")]
    result = run_tool("show_gids", sysfs=write_tree(tmp_path, [hca("rocep1s0f1", [port])]))
    indices = [line.split("\t")[2] for line in result.stdout.decode().splitlines()[2:-1]]
    assert indices == ["0", "1", "10", "11"]


def test_device_order_follows_the_locale(tmp_path: Path) -> None:
    root = _spark_tree(tmp_path)

    def devices(env: dict[str, str]) -> list[str]:
        lines = run_tool("show_gids", sysfs=root, env=env).stdout.decode().splitlines()[2:-1]
        return list(dict.fromkeys(line.split("\t")[0] for line in lines))

    assert devices({"LC_ALL": "C"}) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    assert devices({"LANG": "en_US.UTF-8"}) == ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]


def test_gid_index_comes_from_the_sysfs_tree(tmp_path: Path) -> None:
    root = _spark_tree(tmp_path, gid_index_v2=6)
    rows = [line.split("\t") for line in run_tool("show_gids", "rocep1s0f1", sysfs=root).stdout.decode().splitlines()]
    ipv4_rows = {(row[2], row[5]) for row in rows if row[4:5] == ["192.168.100.1  "]}
    assert ipv4_rows == {("5", "v1"), ("6", "v2")}
