"""The ibstat stand-in against real captures (tests/fixtures/captures/ibstat) and infiniband-diags' rules.

Golden tests: the capture is the only record of its machine (dozens of CAs
with GUIDs, LIDs, capability masks), so the hardware is read from the
capture's own field values into the state schema (``hardware_of``), written
with rdma.write_sysfs, and the stand-in's output must equal the body byte
for byte. What that checks is everything ibstat adds: sysfs formats back to
ibstat's (rate file -> integer, gids/0 -> Port GUID, "0x80" lid -> 128),
CA order (the state lists the CAs reversed), block layout and indentation,
and the ibpanic paths. Paste damage applied to the stand-in's output first:
TABs expanded to 8 columns, CRLF; ibpanic pids replaced on both sides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from captures import (capture_body, captures, crlf, expand_tabs, normalise_pids, rdma, roce_port,
                      run_tool, write_tree)

STATES = {"Active": "ACTIVE", "Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED"}
SPEED_NAMES = {10: "4X SDR", 40: "4X QDR", 100: "4X EDR", 200: "4X HDR", 400: "4X NDR"}


def _port_field(port: dict[str, Any], key: str, value: str) -> None:
    if key == "State":
        port["port_state"] = STATES[value]
        port["state"] = "up" if value == "Active" else "down"
    elif key == "Physical state":
        port["phys_state"] = value
    elif key == "Rate":
        port["rate"] = "%s Gb/sec (%s)" % (value, SPEED_NAMES[int(value)])
    elif key == "Base lid":
        port["lid"] = int(value)
    elif key == "LMC":
        port["lmc"] = int(value)
    elif key == "SM lid":
        port["sm_lid"] = int(value)
    elif key == "Capability mask":
        port["cap_mask"] = value
    elif key == "Port GUID":
        guid = "%016x" % int(value, 16)
        groups = ":".join(guid[i:i + 4] for i in range(0, 16, 4))
        port["gids"] = [] if int(value, 16) == 0 else [
            {"index": 0, "gid": "fe80:0000:0000:0000:" + groups, "type": rdma.TYPE_V1, "ndev": None}]
    elif key == "Link layer":
        port["link_layer"] = value


CA_KEYS = {"CA type": "ca_type", "Firmware version": "fw", "Hardware version": "hw_version",
           "Node GUID": "node_guid", "System image GUID": "sys_image_guid"}


def hardware_of(body: str) -> list[dict[str, Any]]:
    """The CAs an ibstat capture shows, in the state schema, in reverse order."""
    hcas: list[dict[str, Any]] = []
    port: dict[str, Any] = {}
    for line in body.replace("\r", "").splitlines():
        text = line.strip()
        if text.startswith("CA '"):
            hcas.append({"name": text[4:-1], "ports": []})
            continue
        key, _sep, value = text.partition(": ")
        if key in CA_KEYS:
            hcas[-1][CA_KEYS[key]] = value
        elif text.startswith("Port ") and text.endswith(":"):
            port = {"port": int(text[5:-1])}
            hcas[-1]["ports"].append(port)
        elif hcas and hcas[-1]["ports"]:
            _port_field(port, key, value)
    return hcas[::-1]


def _tree(tmp_path: Path, capture: Path) -> Path:
    return write_tree(tmp_path, hardware_of(capture_body(capture)))


def _broken_mlx5_8(tmp_path: Path, capture: Path) -> Path:
    """mlx5_8 is listed (node_type reads 1: CA) but vanished before ibstat could stat it."""
    root = _tree(tmp_path, capture)
    broken = root / "class" / "infiniband" / "mlx5_8"
    broken.mkdir()
    (broken / "node_type").write_text("1: CA\n")
    return root


def _ibdev2netdev_06_host(tmp_path: Path, capture: Path) -> Path:
    hcas = [{"name": "mlx5_%d" % i, "ca_type": "MT4119", "node_guid": "0x0",
             "ports": [roce_port("ens%d" % i, "08:c0:eb:3b:34:%02x" % (0x90 + i))]} for i in range(8)]
    return write_tree(tmp_path, hcas)


def _run(root: Path, *args: str) -> tuple[int, str]:
    result = run_tool("ibstat", *args, sysfs=root)
    return result.returncode, result.stdout.decode() + result.stderr.decode()


def _all(root: Path) -> tuple[int, str]:
    return _run(root)


def _netdev_names_given(root: Path) -> tuple[int, str]:
    """The source ran 'ibstat ib1', then (prompt line) 'ibstat ib2'."""
    rc1, first = _run(root, "ib1")
    rc2, second = _run(root, "ib2")
    assert rc1 == rc2
    return rc1, first + "ubuntu@ubuntu:~$ ibstat ib2\n" + second


# capture -> (sysfs tree, invocation, expected exit status, damage applied to the stand-in's output)
CASES: dict[str, tuple[Callable[[Path, Path], Path], Callable[[Path], tuple[int, str]], int,
                       Callable[[str], str]]] = {
    "01-h100-8x-cx7-ndr400-plus-bf3-eth200.txt": (_tree, _all, 0, expand_tabs),
    "02-cx7-eth400-cx6dx-100-down-polling-disabled.txt": (_tree, _all, 0, str),
    # gpud stored stdout, then the ibpanic line (stderr), then one empty line.
    "03-a100-cx6-hdr200-then-ibpanic.txt": (_broken_mlx5_8, _all, 255, lambda text: expand_tabs(text) + "\n"),
    "04-h100-8x-cx7-ib400-cx6dx-eth-some-down.txt": (_tree, _all, 0, str),
    "05-cx4-eth100-plus-ib-down-rate10.txt": (_tree, _all, 0, expand_tabs),
    "06-ibpanic-netdev-name-given.txt": (_ibdev2netdev_06_host, _netdev_names_given, 255, crlf),
    # A real DGX Spark (Dell Pro Max with GB10); tests/unit/sim/test_spark_captures.py also checks the sim's model of it.
    "07-dgx-spark-gb10-f0-cabled-p2f1-disabled.txt": (_tree, _all, 0, str),
}


@pytest.mark.parametrize("capture", captures("ibstat"), ids=lambda path: path.name)
def test_capture_is_reproduced(tmp_path: Path, capture: Path) -> None:
    assert capture.name in CASES, "describe the hardware of %s in CASES" % capture.name
    tree, invoke, status, damage = CASES[capture.name]
    returncode, text = invoke(tree(tmp_path, capture))
    assert returncode == status
    assert normalise_pids(damage(text)) == normalise_pids(capture_body(capture))


@pytest.fixture
def spark_root(tmp_path: Path) -> Path:
    return write_tree(tmp_path, rdma.default_hcas("spark-head", [{"netdev": "enp1s0f1np1", "ipv4": "10.0.0.1"}]))


def test_spark_ports_read_like_a_dgx_spark(spark_root: Path) -> None:
    returncode, text = _run(spark_root, "rocep1s0f1")
    assert returncode == 0
    port = rdma.default_hcas("spark-head", [])[1]["ports"][0]
    guid = "0x" + rdma.eui64(port["mac"]).replace(":", "")
    assert text.splitlines()[0] == "CA 'rocep1s0f1'"
    assert "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n" in text
    assert "\t\tPort GUID: %s\n\t\tLink layer: Ethernet\n" % guid in text
    assert "\tCA type: MT4129\n\tNumber of ports: 1\n" in text
    _rc, down = _run(spark_root, "rocep1s0f0")
    assert "\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tRate: 40\n" in down


def test_list_short_and_port_guids(spark_root: Path) -> None:
    assert _run(spark_root, "-l") == (0, "roceP2p1s0f0\nroceP2p1s0f1\nrocep1s0f0\nrocep1s0f1\n")
    _rc, short = _run(spark_root, "-s", "rocep1s0f1")
    assert short.count("\n") == 7 and "Port" not in short
    _rc, guids = _run(spark_root, "--port_list")
    assert len(guids.splitlines()) == 4 and all(line.startswith("0x4ebb47fffe") for line in guids.splitlines())


def test_port_argument_prints_the_port_alone(spark_root: Path) -> None:
    returncode, text = _run(spark_root, "rocep1s0f1", "1")
    assert returncode == 0
    assert text.startswith("CA: 'rocep1s0f1'\nPort 1:\nState: Active\nPhysical state: LinkUp\nRate: 200\n")


def test_a_missing_port_warns_then_panics(spark_root: Path) -> None:
    returncode, text = _run(spark_root, "rocep1s0f1", "2")
    assert returncode == 255
    assert normalise_pids(text) == (
        "ibwarn: [PID] ca_stat: CA: 'rocep1s0f1' has no port number 2 - max (1)\n"
        "ibpanic: [PID] main: stat of IB device 'rocep1s0f1' failed: No such file or directory\n")


def test_a_ca_name_matches_by_prefix_like_strncmp(spark_root: Path) -> None:
    _rc, text = _run(spark_root, "rocep1s0f1-typo")
    assert text.startswith("CA 'rocep1s0f1'\n")


def test_unknown_ca_is_an_ibpanic_on_stderr(spark_root: Path) -> None:
    result = run_tool("ibstat", "enp1s0f1np1", sysfs=spark_root)
    assert (result.returncode, result.stdout) == (255, b"")
    assert normalise_pids(result.stderr.decode()) == (
        "ibpanic: [PID] main: 'enp1s0f1np1' IB device can't be found: No such file or directory\n")


USAGE = """
Usage: ibstat [options] <ca_name> [portnum]

Options:
  --list_of_cas, -l       list all IB devices
  --short, -s             short output
  --port_list, -p         show port list
  --config, -z <config>   use config file, default: /etc/infiniband-diags/ibdiag.conf
  --verbose, -v           increase verbosity level
  --debug, -d             raise debug level
  --help, -h              help message
  --version, -V           show version

Examples:
  ibstat -l       # list all IB devices
  ibstat mthca0 2 # stat port 2 of 'mthca0'

"""


@pytest.mark.parametrize(("args", "message"), [
    (["-x"], "ibstat: invalid option -- 'x'\n"),
    (["--bogus"], "ibstat: unrecognized option '--bogus'\n"),
    (["-z"], "ibstat: option requires an argument -- 'z'\n"),
    (["--short=yes"], "ibstat: option '--short' doesn't allow an argument\n"),
    (["-h"], ""),
])
def test_bad_options_print_usage_and_exit_2(spark_root: Path, args: list[str], message: str) -> None:
    result = run_tool("ibstat", *args, sysfs=spark_root)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == message + USAGE


def test_version_and_option_abbreviation(spark_root: Path) -> None:
    result = run_tool("ibstat", "-V", sysfs=spark_root)
    assert (result.returncode, result.stderr) == (0, b"ibstat BUILD VERSION: 50.0\n")
    assert _run(spark_root, "--list") == _run(spark_root, "-l")
