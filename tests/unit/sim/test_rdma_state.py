"""sparksim.rdma: the Spark ConnectX-7 state, what a reboot does to it, and the sysfs tree it writes."""

from __future__ import annotations

import copy
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from captures import rdma, run_tool

RAILS: list[dict[str, Any]] = [
    {"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"},
    {"netdev": "enP2p1s0f1np1", "ipv4": "192.168.101.1", "gid_index_v2": 6},
]


def _port(hcas: list[dict[str, Any]], netdev: str) -> dict[str, Any]:
    return next(p for h in hcas for p in h["ports"] if p["netdev"] == netdev)


def _by_index(port: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(entry["index"]): entry for entry in port["gids"]}


# ---------------------------------------------------------------- default_hcas

def test_the_spark_layout() -> None:
    hcas = rdma.default_hcas("spark-head", RAILS)
    assert [(h["name"], h["ports"][0]["netdev"], h["pci"], h["ca_type"], h["ports"][0]["port"]) for h in hcas] == [
        ("rocep1s0f0", "enp1s0f0np0", "0000:01:00.0", "MT4129", 1),
        ("rocep1s0f1", "enp1s0f1np1", "0000:01:00.1", "MT4129", 1),
        ("roceP2p1s0f0", "enP2p1s0f0np0", "0002:01:00.0", "MT4129", 1),
        ("roceP2p1s0f1", "enP2p1s0f1np1", "0002:01:00.1", "MT4129", 1),
    ]


def test_rails_are_up_with_ipv4_gids_and_the_others_down_with_link_local_only() -> None:
    hcas = rdma.default_hcas("spark-head", RAILS)
    for netdev in ("enp1s0f0np0", "enP2p1s0f0np0"):
        port = _port(hcas, netdev)
        assert (port["state"], "ipv4" in port, sorted(_by_index(port))) == ("down", False, [0, 1])
    rail = _port(hcas, "enp1s0f1np1")
    assert (rail["state"], rail["ipv4"], rail["mtu"]) == ("up", "192.168.100.1", 9000)
    table = _by_index(rail)
    assert sorted(table) == [0, 1, 2, 3]
    assert table[2] == {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:6401", "type": "IB/RoCE v1",
                        "ndev": "enp1s0f1np1"}
    assert (table[3]["gid"], table[3]["type"]) == (table[2]["gid"], "RoCE v2")


def test_link_local_gids_come_from_the_mac_by_eui64() -> None:
    assert rdma.link_local_gid("08:c0:eb:21:03:da") == "fe80:0000:0000:0000:0ac0:ebff:fe21:03da"
    for hca in rdma.default_hcas("spark-head", RAILS):
        port = hca["ports"][0]
        table = _by_index(port)
        assert table[0]["gid"] == table[1]["gid"] == rdma.link_local_gid(port["mac"])
        assert (table[0]["type"], table[1]["type"]) == ("IB/RoCE v1", "RoCE v2")


def test_gid_index_v2_six_reproduces_the_worker_of_seed_003() -> None:
    port = _port(rdma.default_hcas("spark-worker", RAILS), "enP2p1s0f1np1")
    table = _by_index(port)
    assert (table[5]["type"], table[6]["type"]) == ("IB/RoCE v1", "RoCE v2")
    assert table[5]["gid"] == table[6]["gid"] == rdma.ipv4_gid("192.168.101.1")
    fillers = [table[i]["gid"] for i in (2, 3)]
    assert fillers[0] == fillers[1] and fillers[0].startswith("fd") and 4 not in table


def test_identity_is_deterministic_per_hostname() -> None:
    head = rdma.default_hcas("spark-head", RAILS)
    assert head == rdma.default_hcas("spark-head", RAILS)
    worker = rdma.default_hcas("spark-worker", RAILS)
    macs = [h["ports"][0]["mac"] for h in head]
    assert len(set(macs)) == 4 and not set(macs) & {h["ports"][0]["mac"] for h in worker}
    assert {h["sys_image_guid"] for h in head} == {head[0]["node_guid"]}


def test_a_rail_on_a_foreign_netdev_is_refused() -> None:
    with pytest.raises(ValueError, match="eth0"):
        rdma.default_hcas("spark-head", [{"netdev": "eth0", "ipv4": "10.0.0.1"}])


# ------------------------------------------------------------------ apply_boot

def _state(**overrides: Any) -> dict[str, Any]:
    state = {"hostname": "spark-head", "boot": {"count": 2, "reshuffle_gids": True, "seed": 0},
             "cables_seated": True, "hcas": rdma.default_hcas("spark-head", RAILS)}
    state.update(overrides)
    return state


@pytest.mark.parametrize("seed", range(8))
def test_reshuffle_moves_every_ipv4_pair_and_keeps_the_rest(seed: int) -> None:
    state = _state()
    before = copy.deepcopy(state["hcas"])
    lines = rdma.apply_boot(state, random.Random(seed))
    for netdev, ipv4 in (("enp1s0f1np1", "192.168.100.1"), ("enP2p1s0f1np1", "192.168.101.1")):
        old = rdma.ipv4_pairs_of(_port(before, netdev)["gids"])
        new = rdma.ipv4_pairs_of(_port(state["hcas"], netdev)["gids"])
        assert len(new) == 1 and new[0][0] == ipv4
        assert new[0][2] != old[0][2]
        assert new[0][1] == new[0][2] - 1
        assert [e for e in _port(state["hcas"], netdev)["gids"] if e["index"] < 2] == \
               [e for e in _port(before, netdev)["gids"] if e["index"] < 2]
        assert any(ipv4 in line and "index %d to %d" % (old[0][2], new[0][2]) in line for line in lines)
    for netdev in ("enp1s0f0np0", "enP2p1s0f0np0"):
        assert _port(state["hcas"], netdev) == _port(before, netdev)


@pytest.mark.parametrize("seed", range(8))
def test_reshuffle_moves_the_twins_in_step(seed: int) -> None:
    """Both twins of a cage keep one common v2 index (NCCL_IB_GID_INDEX is one index for every HCA)."""
    twins = [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1", "gid_index_v2": 6},
             {"netdev": "enP2p1s0f1np1", "ipv4": "192.168.105.1", "gid_index_v2": 6}]
    state = _state(hcas=rdma.default_hcas("spark-head", twins))
    rdma.apply_boot(state, random.Random(seed))
    new = {rdma.ipv4_pairs_of(_port(state["hcas"], netdev)["gids"])[0][2] for netdev in ("enp1s0f1np1", "enP2p1s0f1np1")}
    assert len(new) == 1 and new != {6}


def test_no_reshuffle_no_change() -> None:
    state = _state(boot={"count": 2, "reshuffle_gids": False, "seed": 0})
    before = copy.deepcopy(state)
    assert rdma.apply_boot(state, random.Random(1)) == []
    assert state == before


@pytest.mark.parametrize(("seated", "persists", "recovers"),
                         [(True, False, True), (False, False, False), (True, True, False), (False, True, False)])
def test_throttle_recovery(seated: bool, persists: bool, recovers: bool) -> None:
    state = _state(boot={"count": 2, "reshuffle_gids": False}, cables_seated=seated,
                   nic={"throttled": True, "throttle_persists": persists})
    lines = rdma.apply_boot(state, random.Random(0))
    assert state["nic"]["throttled"] is (not recovers)
    assert bool(lines) is recovers
    if recovers:
        assert lines == ["ConnectX-7: throttle cleared, links re-initialised with the cables seated"]


# ----------------------------------------------------------------- write_sysfs

def _files(root: Path) -> set[str]:
    found = set()
    for base, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(base, name), root))
    return found


def test_port_files_read_like_the_kernel(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    rdma.write_sysfs(_state(), str(root))
    port = root / "class" / "infiniband" / "rocep1s0f1" / "ports" / "1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "rate").read_text() == "200 Gb/sec (4X HDR)\n"
    assert (port / "link_layer").read_text() == "Ethernet\n"
    assert sorted(int(n) for n in os.listdir(port / "gids")) == list(range(256))
    assert (port / "gids" / "3").read_text() == "0000:0000:0000:0000:0000:ffff:c0a8:6401\n"
    assert (port / "gid_attrs" / "types" / "3").read_text() == "RoCE v2\n"
    assert (port / "gid_attrs" / "ndevs" / "3").read_text() == "enp1s0f1np1\n"
    assert (port / "gids" / "200").read_text() == rdma.ZERO_GID + "\n"
    assert not (port / "gid_attrs" / "types" / "200").exists()
    down = root / "class" / "infiniband" / "rocep1s0f0" / "ports" / "1"
    assert [(down / name).read_text() for name in ("state", "phys_state", "rate")] == \
           ["1: DOWN\n", "3: Disabled\n", "40 Gb/sec (4X QDR)\n"]
    device = root / "class" / "infiniband" / "rocep1s0f1" / "device"
    assert os.readlink(device) == "../../../bus/pci/devices/0000:01:00.1"
    assert (device / "vendor").read_text() == "0x15b3\n" and (device / "device").read_text() == "0x1021\n"
    net = root / "class" / "net" / "enp1s0f1np1"
    assert [(net / name).read_text() for name in ("carrier", "operstate", "mtu", "speed")] == \
           ["1\n", "up\n", "9000\n", "200000\n"]


def test_regeneration_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    foreign = root / "class" / "net" / "enP7s7"
    foreign.mkdir(parents=True)
    (foreign / "mtu").write_text("1500\n")
    small = _state(boot={"count": 1}, hcas=rdma.default_hcas("spark-head", [RAILS[0]]))
    rdma.write_sysfs(small, str(root))
    expected = _files(root)
    (root / "class" / ".infiniband.new-crashed").mkdir()  # left by an interrupted run
    rdma.write_sysfs(_state(), str(root))
    assert (root / "class" / "infiniband" / "roceP2p1s0f1" / "ports" / "1" / "gids" / "6").read_text().startswith("0000")
    rdma.write_sysfs(small, str(root))
    assert _files(root) == expected
    assert (root / "class" / "infiniband" / "roceP2p1s0f1" / "ports" / "1" / "gids" / "6").read_text() == \
           rdma.ZERO_GID + "\n"
    assert (foreign / "mtu").read_text() == "1500\n"
    fewer = copy.deepcopy(small)
    fewer["hcas"] = fewer["hcas"][:2]
    rdma.write_sysfs(fewer, str(root))
    assert sorted(os.listdir(root / "class" / "infiniband")) == ["rocep1s0f0", "rocep1s0f1"]
    assert sorted(os.listdir(root / "class" / "net")) == ["enP7s7", "enp1s0f0np0", "enp1s0f1np1"]
    assert sorted(os.listdir(root / "bus" / "pci" / "devices")) == ["0000:01:00.0", "0000:01:00.1"]
    assert [n for n in os.listdir(root / "class") if n.startswith(".")] == []


def test_show_gids_follows_a_reboot(tmp_path: Path) -> None:
    state = _state()
    root = tmp_path / "sys"
    rdma.write_sysfs(state, str(root))
    rdma.apply_boot(state, random.Random(3))
    rdma.write_sysfs(state, str(root))
    new_v2 = rdma.ipv4_pairs_of(_port(state["hcas"], "enp1s0f1np1")["gids"])[0][2]
    rows = run_tool("show_gids", "rocep1s0f1", sysfs=root).stdout.decode().splitlines()
    assert "rocep1s0f1\t1\t%d\t0000:0000:0000:0000:0000:ffff:c0a8:6401\t192.168.100.1  \tv2\tenp1s0f1np1" \
           % new_v2 in rows


def test_bad_gid_is_refused(tmp_path: Path) -> None:
    state = _state()
    _port(state["hcas"], "enp1s0f1np1")["gids"].append(
        {"index": 300, "gid": rdma.ipv4_gid("10.0.0.9"), "type": "RoCE v2", "ndev": "enp1s0f1np1"})
    with pytest.raises(ValueError, match="outside the table"):
        rdma.write_sysfs(state, str(tmp_path / "sys"))
    assert not (tmp_path / "sys").exists()


# -------------------------------------------------------------- shared helpers

def test_vpd_strings_pipeline_gives_id_and_part() -> None:
    lines = rdma.strings(rdma.vpd_bytes(rdma.spark_vpd("MT0000X00000")))
    assert lines[0] == rdma.SPARK_VPD_ID
    assert lines[3].split()[0] == rdma.SPARK_PART


NAMES = ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1", "mlx5_0", "mlx5_1", "mlx5_10",
         "mlx5_2", "mlx5_bond_0", "bnxt_re0", "bnxt_re1", "cxgb4_0", "hfi1_0", "ibp129s0", "ib0",
         "enp1s0f0np0", "enP2p1s0f1np1", "0", "1", "10", "100", "2", "255", "A", "a", "B", "b"]


def test_c_collation_is_byte_order() -> None:
    assert rdma.ls_order(NAMES, {"LC_ALL": "C.UTF-8", "LANG": "en_US.UTF-8"}) == sorted(NAMES)
    assert rdma.ls_order(NAMES, {}) == sorted(NAMES)


def test_en_us_collation_matches_glibc(tmp_path: Path) -> None:
    """Compared with glibc's own en_US.UTF-8, built with localedef into a private LOCPATH."""
    if not shutil.which("localedef"):
        pytest.skip("localedef is not installed")
    built = subprocess.run(["localedef", "-i", "en_US", "-f", "UTF-8", str(tmp_path / "en_US.UTF-8")],
                           capture_output=True, check=False)
    if built.returncode not in (0, 1) or not (tmp_path / "en_US.UTF-8").is_dir():
        pytest.skip("cannot build the en_US.UTF-8 locale here")
    script = ("import locale, sys; locale.setlocale(locale.LC_COLLATE, 'en_US.UTF-8'); "
              "print('\\n'.join(sorted(sys.argv[1:], key=locale.strxfrm)))")
    glibc = subprocess.run(["python3", "-c", script, *NAMES], capture_output=True, text=True, check=True,
                           env={**os.environ, "LOCPATH": str(tmp_path)}).stdout.split()
    assert rdma.ls_order(NAMES, {"LANG": "en_US.UTF-8"}) == glibc


def test_the_esrt_reads_like_the_kernels_and_follows_the_state(tmp_path: Path) -> None:
    """write_sysfs also writes the system firmware's ESRT (sparksim.firmware), as drivers/firmware/efi/esrt.c prints
    it, root-only; a state with another version or a failed last attempt replaces the whole table."""
    root = tmp_path / "sys"
    rdma.write_sysfs(_state(), str(root))
    entry = root / "firmware" / "efi" / "esrt" / "entries" / "entry0"
    assert sorted(os.listdir(entry)) == sorted(["fw_class", "fw_type", "fw_version", "lowest_supported_fw_version",
                                                "capsule_flags", "last_attempt_version", "last_attempt_status"])
    assert (entry / "capsule_flags").read_text() == "0x8010\n" and (entry / "fw_type").read_text() == "1\n"
    assert oct(os.stat(entry / "fw_version").st_mode & 0o777) == "0o400"
    moved = _state(firmware={"esrt": [{"fw_class": "ABC", "fw_type": 1, "fw_version": 7, "last_attempt_status": 6}]})
    rdma.write_sysfs(moved, str(root))
    assert [(entry / n).read_text() for n in ("fw_class", "fw_version", "last_attempt_status")] == ["abc\n", "7\n", "6\n"]
    assert sorted(os.listdir(root / "firmware" / "efi")) == ["esrt"]
