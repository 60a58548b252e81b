"""The ethtool stand-in: ``ethtool DEVNAME`` for the Spark fabric netdevs, ethtool's errors otherwise.

No ethtool capture of a DGX Spark is in tests/fixtures/captures; these tests hold the
stand-in to ethtool 6.7's netlink output layout (netlink/settings.c) and to
the facts the roles check: Speed, Duplex, Link detected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import rdma, run_tool, write_tree


@pytest.fixture
def spark_root(tmp_path: Path) -> Path:
    return write_tree(tmp_path, rdma.default_hcas("spark-head", [{"netdev": "enp1s0f1np1", "ipv4": "10.0.0.1"}]))


def test_up_port(spark_root: Path) -> None:
    result = run_tool("ethtool", "enp1s0f1np1", sysfs=spark_root, env={"SPARK_SIM_EUID": "0"})
    text = result.stdout.decode()
    assert (result.returncode, result.stderr) == (0, b"")
    assert text.startswith("Settings for enp1s0f1np1:\n\tSupported ports: [ Backplane ]\n"
                           "\tSupported link modes:   1000baseKX/Full\n\t                        10000baseKR/Full\n")
    assert "\tSpeed: 200000Mb/s\n\tLanes: 4\n\tDuplex: Full\n\tAuto-negotiation: on\n" \
           "\tPort: Direct Attach Copper\n" in text
    assert "\tSupported FEC modes: None\t RS\t BASER\t LLRS\n" in text
    assert text.endswith("\tSupports Wake-on: d\n\tWake-on: d\n        Current message level: 0x00000004 (4)\n"
                         "                               link\n\tLink detected: yes\n")


def test_down_port_without_cable(spark_root: Path) -> None:
    text = run_tool("ethtool", "enp1s0f0np0", sysfs=spark_root).stdout.decode()
    assert "\tSpeed: Unknown!\n\tDuplex: Unknown! (255)\n\tAuto-negotiation: on\n\tPort: Other\n" in text
    assert "Lanes" not in text
    assert text.endswith("\tLink detected: no (No cable)\n")


def test_down_port_with_cable_but_no_partner(tmp_path: Path) -> None:
    hcas = rdma.default_hcas("spark-head", [{"netdev": "enp1s0f1np1", "ipv4": "10.0.0.1"}])
    hcas[1]["ports"][0]["state"] = "down"
    text = run_tool("ethtool", "enp1s0f1np1", sysfs=write_tree(tmp_path, hcas)).stdout.decode()
    assert "\tPort: Direct Attach Copper\n" in text
    assert text.endswith("\tLink detected: no (Autoneg, No partner detected)\n")


def test_not_root_loses_wake_on_lan(spark_root: Path) -> None:
    result = run_tool("ethtool", "enp1s0f1np1", sysfs=spark_root, env={"SPARK_SIM_EUID": "1000"})
    assert result.returncode == 0
    assert result.stderr == b"netlink error: Operation not permitted\n"
    assert b"Wake-on" not in result.stdout and result.stdout.endswith(b"\tLink detected: yes\n")


@pytest.mark.parametrize("netdev", ["eth0", "enP7s7", "lo", "../net"])
def test_unknown_netdev(spark_root: Path, netdev: str) -> None:
    result = run_tool("ethtool", netdev, sysfs=spark_root)
    assert (result.returncode, result.stdout) == (1, b"")
    assert result.stderr == b"netlink error: no device matches name (offset 24)\nnetlink error: No such device\n"


@pytest.mark.parametrize("args", [[], ["--bogus", "enp1s0f1np1"], ["enp1s0f1np1", "extra"]])
def test_bad_command_line(spark_root: Path, args: list[str]) -> None:
    result = run_tool("ethtool", *args, sysfs=spark_root)
    assert (result.returncode, result.stdout) == (1, b"")
    assert result.stderr == b"ethtool: bad command line argument(s)\nFor more information run ethtool -h\n"


def test_version_and_unsimulated_options(spark_root: Path) -> None:
    assert run_tool("ethtool", "--version", sysfs=spark_root).stdout == b"ethtool version 6.7\n"
    result = run_tool("ethtool", "-i", "enp1s0f1np1", sysfs=spark_root)
    assert result.returncode == 1 and b"not simulated" in result.stderr
