# -*- coding: utf-8 -*-
"""ibdev2netdev / ibstat / ethtool parsers against every real capture, and
rail_link_status on the Spark layout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from captures import capture_body, captures
from ansible_collections.dgxspark.cluster.plugins.module_utils.ibtools import (
    parse_ethtool,
    parse_ibdev2netdev,
    parse_ibstat,
    rail_link_status,
)

IBDEV = {p.name: p for p in captures("ibdev2netdev")}
IBSTAT = {p.name: p for p in captures("ibstat")}

# What each capture's '# expect:' line says, as (device, netdev, carrier) rows.
IBDEV_EXPECT = {
    "01-dgx-spark-two-sparks-f1-up.txt": [("roceP2p1s0f0", "enP2p1s0f0np0", "Down"), ("roceP2p1s0f1", "enP2p1s0f1np1", "Up"),
                                          ("rocep1s0f0", "enp1s0f0np0", "Down"), ("rocep1s0f1", "enp1s0f1np1", "Up")],
    "04-mixed-cx4-cx5-cx6-ib0-vfs.txt": [("mlx5_0", "ens4f0", "Down"), ("mlx5_1", "ens4f1", "Down"), ("mlx5_2", "ens6", "Up"),
                                         ("mlx5_3", "ens14f0", "Up"), ("mlx5_4", "ens14f1", "Down"), ("mlx5_5", "ib0", "Up"),
                                         ("mlx5_6", "ens6f1", "Down"), ("mlx5_7", "ens6f2", "Down")],
    "06-two-ibdevs-same-netdev-ib1.txt": [("mlx5_0", "ens4f0", "Down"), ("mlx5_1", "ens4f1", "Down"), ("mlx5_2", "ens6", "Up"),
                                          ("mlx5_3", "ens14f0", "Up"), ("mlx5_4", "ens14f1", "Down"), ("mlx5_5", "ib0", "Down"),
                                          ("mlx5_6", "ib1", "Down"), ("mlx5_7", "ib1", "Down")],
    "07-ib-netdev-ibp129s0.txt": [("mlx5_0", "enp1s0f0", "Up"), ("mlx5_1", "enp1s0f1", "Up"), ("mlx5_2", "ibp129s0", "Up"),
                                  ("mlx5_3", "enp193s0", "Up")],
    "08-two-port-cx6dx-np-names.txt": [("mlx5_0", "enp61s0f0np0", "Down"), ("mlx5_1", "enp61s0f1np1", "Up")],
}


@pytest.mark.parametrize("name", sorted(IBDEV), ids=sorted(IBDEV))
def test_ibdev2netdev_captures_parse(name):
    rows = parse_ibdev2netdev(capture_body(IBDEV[name]))
    assert rows, "no rows parsed"
    for row in rows:
        assert row["carrier"] in ("Up", "Down")
        assert "\r" not in row["netdev"] and "\r" not in row["device"]
        assert row["port"] >= 1
    if name in IBDEV_EXPECT:
        assert [(r["device"], r["netdev"], r["carrier"]) for r in rows] == IBDEV_EXPECT[name]


def test_ibdev2netdev_verbose_capture_keeps_pci_and_port_state():
    rows = parse_ibdev2netdev(capture_body(IBDEV["05-verbose-v-flag.txt"]))
    by_dev = {r["device"]: r for r in rows}
    assert len(rows) == 8
    assert by_dev["mlx5_5"]["netdev"] == "ib0" and by_dev["mlx5_5"]["port_state"] == "ACTIVE"
    assert by_dev["mlx5_5"]["pci"] == "0000:b1:00.0"
    assert by_dev["mlx5_6"]["port_state"] == "DOWN" and by_dev["mlx5_6"]["carrier"] == "Down"


def test_two_devices_on_one_netdev_are_both_kept():
    rows = parse_ibdev2netdev(capture_body(IBDEV["06-two-ibdevs-same-netdev-ib1.txt"]))
    assert [r["device"] for r in rows if r["netdev"] == "ib1"] == ["mlx5_6", "mlx5_7"]
    status = rail_link_status({"netdev": "ib1"}, rows, {"cas": {}, "errors": []})
    assert any("claimed by several RDMA devices (mlx5_6, mlx5_7)" in p for p in status["problems"])


@pytest.mark.parametrize("name", sorted(IBSTAT), ids=sorted(IBSTAT))
def test_ibstat_captures_parse(name):
    parsed = parse_ibstat(capture_body(IBSTAT[name]))
    assert parsed["cas"] or parsed["errors"]
    for ca_name, ca in parsed["cas"].items():
        assert "'" not in ca_name
        for port in ca["ports"].values():
            assert port.get("state") in ("Active", "Down", "Initializing", "Armed", None)
            assert isinstance(port.get("rate"), (int, float)) or port.get("rate") is None


def test_ibstat_h100_capture_has_nine_cas_and_the_bf3_bond():
    parsed = parse_ibstat(capture_body(IBSTAT["01-h100-8x-cx7-ndr400-plus-bf3-eth200.txt"]))
    assert len(parsed["cas"]) == 9
    assert "mlx5_2" not in parsed["cas"]
    bond = parsed["cas"]["mlx5_bond_0"]["ports"][1]
    assert (bond["state"], bond["physical_state"], bond["rate"], bond["link_layer"]) == ("Active", "LinkUp", 200, "Ethernet")
    assert parsed["cas"]["mlx5_0"]["ca_type"] == "MT4129" and parsed["cas"]["mlx5_0"]["firmware"] == "28.41.1000"


def test_ibstat_down_ports_report_placeholder_rates():
    parsed = parse_ibstat(capture_body(IBSTAT["02-cx7-eth400-cx6dx-100-down-polling-disabled.txt"]))
    assert len(parsed["cas"]) == 12
    assert parsed["cas"]["mlx5_11"]["ports"][1]["physical_state"] == "Polling"
    assert parsed["cas"]["mlx5_5"]["ports"][1]["physical_state"] == "Disabled"
    assert parsed["cas"]["mlx5_5"]["ports"][1]["rate"] == 40


def test_ibstat_panic_only_capture_has_no_cas():
    parsed = parse_ibstat(capture_body(IBSTAT["06-ibpanic-netdev-name-given.txt"]))
    assert parsed["cas"] == {}
    assert parsed["errors"] == ["main: 'ib1' IB device can't be found: No such file or directory",
                                "main: 'ib2' IB device can't be found: No such file or directory"]


def test_ibstat_panic_after_blocks_keeps_both():
    parsed = parse_ibstat(capture_body(IBSTAT["03-a100-cx6-hdr200-then-ibpanic.txt"]))
    assert parsed["cas"]
    assert parsed["errors"] == ["main: stat of IB device 'mlx5_8' failed: No such file or directory"]


SPARK_IBDEV = capture_body(IBDEV["01-dgx-spark-two-sparks-f1-up.txt"]) if IBDEV else ""


def spark_ibstat(state="Active", phys="LinkUp", rate=200):
    return parse_ibstat("CA 'rocep1s0f1'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.45.4028\n"
                        "\tPort 1:\n\t\tState: %s\n"
                        "\t\tPhysical state: %s\n\t\tRate: %d\n\t\tLink layer: Ethernet\n" % (state, phys, rate))


def test_healthy_spark_rail_has_no_problems():
    status = rail_link_status({"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"}, parse_ibdev2netdev(SPARK_IBDEV),
                              spark_ibstat(), mtu=9000, speed_mbps=200000)
    assert status["problems"] == []
    assert (status["device"], status["port"], status["rate"]) == ("rocep1s0f1", 1, 200)
    assert status["firmware"] == "28.45.4028"   # ibstat's, for the cross-node firmware report


@pytest.mark.parametrize("rail,ibstat,fragment", [
    ({"netdev": "enp1s0f0np0"}, spark_ibstat(), "enp1s0f0np0 (rocep1s0f0 port 1) has no carrier"),
    ({"netdev": "eth9"}, spark_ibstat(), "netdev eth9 is not an RDMA netdev (ibdev2netdev lists roceP2p1s0f0->enP2p1s0f0np0"),
    ({"netdev": "enp1s0f1np1"}, spark_ibstat("Down", "Polling", 40), "rocep1s0f1 port 1 is Down / Polling (ibstat), expected Active / LinkUp"),
    ({"netdev": "enp1s0f1np1"}, {"cas": {}, "errors": ["main: stat failed"]}, "ibstat has no port 1 for rocep1s0f1 (main: stat failed)"),
], ids=["no-carrier", "not-rdma", "port-down", "ibstat-panic"])
def test_unhealthy_rails_are_named(rail, ibstat, fragment):
    status = rail_link_status(rail, parse_ibdev2netdev(SPARK_IBDEV), ibstat)
    assert any(fragment in p for p in status["problems"]), status["problems"]


def test_ethtool_speed_and_link():
    text = "Settings for enp1s0f1np1:\n\tSpeed: 200000Mb/s\n\tDuplex: Full\n\tLink detected: yes\n"
    assert parse_ethtool(text) == {"speed_mbps": 200000, "link_detected": True}
    assert parse_ethtool("Settings for x:\n\tSpeed: Unknown!\n\tLink detected: no\n") == {"speed_mbps": None, "link_detected": False}


def test_parsers_read_the_sim_stand_ins(tmp_path):
    """The stand-ins a molecule run exercises and these parsers agree on a Spark node."""
    from captures import rdma, run_tool, write_tree

    hcas = rdma.default_hcas("spark-head", [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"}])
    sysfs = write_tree(tmp_path, hcas)
    rows = parse_ibdev2netdev(run_tool("ibdev2netdev", sysfs=sysfs).stdout.decode())
    ibstat = parse_ibstat(run_tool("ibstat", sysfs=sysfs).stdout.decode())
    ethtool = parse_ethtool(run_tool("ethtool", "enp1s0f1np1", sysfs=sysfs).stdout.decode())
    status = rail_link_status({"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"}, rows, ibstat,
                              mtu=9000, speed_mbps=ethtool["speed_mbps"])
    assert status["problems"] == [], status
    assert (status["device"], status["carrier"], status["speed_mbps"]) == ("rocep1s0f1", "Up", 200000)
    down = rail_link_status({"netdev": "enp1s0f0np0"}, rows, ibstat)
    assert any("has no carrier" in p for p in down["problems"])
