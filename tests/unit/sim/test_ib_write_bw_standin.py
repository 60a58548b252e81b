"""The ib_write_bw stand-in (sim/node/usr/bin/ib_write_bw): server and client as real processes on 127.0.0.1.

What the output must look like, from linux-rdma/perftest:

* src/perftest_parameters.h: RESULT_LINE (87 dashes), RESULT_FMT_G
  " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]", RESULT_FMT (MB/sec),
  REPORT_FMT " %-7lu    %-10lu       %-7.2lf            %-7.2lf\\t\\t   %-7.6lf".
* src/perftest_parameters.c ctx_print_test_info: " Dual-port       : %s\\t\\tDevice         : %s", " rdma_cm QPs\\t : %s",
  " TX depth        : %d" only on the client; force_dependecies: " WARNING: BW peak won't be measured in this run."
  and CQ moderation 1 above 8 KiB messages; parser(): " Invalid Command or flag." / " Please check command line
  and run again." then usage(); write_bw.c main(): " Parser function exited with Error", the server banner
  "* Waiting for client to connect... *", " Unable to find the Infiniband/RoCE device".
* src/perftest_communication.[ch]: BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x", RDMA_FMT
  " RKey %#08x VAddr %#016Lx", PERF_GID_FMT " %s: %02d:...", ethernet_client_connect
  "Couldn't connect to %s:%d", establish_connection "Unable to open file descriptor for socket connection"
  (no newline), ctx_check_gid_compatibility; perftest_resources.c ctx_find_dev "IB device %s not found".

And the real DGX Spark captures it was checked against: NVIDIA/dgx-spark-playbooks
nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md (" Link type       : Ethernet",
" GID index       : 3", " CQ Moderation   : 1", " Mtu             : 1024[B]" at MTU 1500, 92.57 and 97.28 Gb/s per
rail, MsgRate 0.176554 = 92.57e9/8/65536/1e6) and eugr/spark-vllm-docker docs/NETWORKING.md (-q 4:
" 65536      20000            111.72             111.71             0.213070").
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "sim" / "node" / "usr" / "bin" / "ib_write_bw"
NODE_LIB = REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"
if str(NODE_LIB) not in sys.path:
    sys.path.insert(0, str(NODE_LIB))

from sparksim import rdma, state as statefile  # noqa: E402

from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest import parse_ib_write_bw  # noqa: E402
from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest_probe import tcp_listening  # noqa: E402

DASHES = "-" * 87 + "\n"
RAILS = [{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1"},
         {"netdev": "enP2p1s0f1np1", "ipv4": "192.168.101.1", "gid_index_v2": 5}]


def make_node(tmp_path: Path, name: str, throttled: bool = False, mtu: int = 9000, sysfs: str | None = None,
              only: str | None = None) -> dict[str, str]:
    """A node's state JSON and sysfs (rdma.default_hcas + write_sysfs); returns its environment.

    The bandwidth figures live in the JSON only, so a node that differs from another one only
    there can share that node's ``sysfs``; ``only`` keeps one RDMA device (fewer files to write).
    The GID tables are cut to 32 entries for the same reason.
    """
    base = tmp_path / name
    base.mkdir()
    rails = [dict(rail, mtu=mtu) for rail in RAILS]
    hcas = [hca for hca in rdma.default_hcas(name, rails) if only in (None, hca["name"])]
    for hca in hcas:
        for port in hca["ports"]:
            port["gid_tbl_len"] = 32          # a Spark has 256; 32 writes 8x fewer files and holds indices 0..31
    state = {"version": 1, "hostname": name, "hcas": hcas, "sysfs_root": sysfs or str(base / "sys"),
             "nic": {"throttled": throttled, "throttle_persists": False}}
    statefile.save(state, str(base / "state.json"))
    if sysfs is None:
        rdma.write_sysfs(state, str(base / "sys"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "POSIXLY"))}
    environ.update(SPARK_SIM_STATE=str(base / "state.json"), SPARK_SIM_SYSFS=state["sysfs_root"],
                   SPARK_SIM_IB_WRITE_BW_MAX_SLEEP="0.05")
    return environ


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def command(*args: str) -> list[str]:
    interpreter = os.environ.get("SPARK_SIM_TOOL_PYTHON")
    return ([interpreter] if interpreter else []) + [str(TOOL), *args]


def run_tool(environ: dict[str, str], *args: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), env=environ, capture_output=True, text=True, timeout=timeout, check=False)


def pair(tmp_path: Path, server_env: dict[str, str], client_env: dict[str, str], server_args: list[str],
         client_args: list[str], server_launcher: list[str] | None = None,
         ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Run a server, wait until it listens on its TCP port, run the client against 127.0.0.1; both results.

    Not on its banner: perftest (and the stand-in) print "Waiting for client to connect" before the socket is bound,
    and the client does not retry (ethernet_client_connect). The listen is read from /proc/net/tcp without
    connecting (the server accepts exactly one client), as the module's probe does (perftest_probe.tcp_listening)."""
    port = str(free_port())
    out_path, err_path = tmp_path / ("srv-%s.out" % port), tmp_path / ("srv-%s.err" % port)
    argv = (server_launcher + [str(TOOL), *server_args, "-p", port]) if server_launcher else command(*server_args, "-p", port)
    with open(out_path, "w") as out, open(err_path, "w") as err:
        server = subprocess.Popen(argv, env=server_env, stdout=out, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 60
            while not tcp_listening(int(port)):
                assert server.poll() is None, "the server exited %s: %s" % (server.returncode, err_path.read_text())
                assert time.monotonic() < deadline, "the server never listened on %s: %s" % (port, out_path.read_text())
                time.sleep(0.02)
            began = time.monotonic()
            client = run_tool(client_env, *client_args, "-p", port, "127.0.0.1")
            client.seconds = time.monotonic() - began          # type: ignore[attr-defined]  # the client's run alone
            server.wait(timeout=10)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    served = subprocess.CompletedProcess(server.args, server.returncode, out_path.read_text(), err_path.read_text())
    return served, client


def mask(text: str) -> str:
    """QPN/PSN/RKey/VAddr are random in perftest too (lrand48, kernel-assigned)."""
    text = re.sub(r"QPN 0x[0-9a-f]+ PSN (?:0x[0-9a-f]+|0+) RKey 0x[0-9a-f]+ VAddr 0x[0-9a-f]+",
                  "QPN <qpn> PSN <psn> RKey <rkey> VAddr <vaddr>", text)
    return re.sub(r"Failed to modify QP \d+ to RTR", "Failed to modify QP <qpn> to RTR", text)


def numbers(line: str) -> list[float]:
    return [float(token) for token in line.split()]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Writing a sysfs tree takes a while (4 devices x 256 GIDs): the nodes are built once per module."""
    base = tmp_path_factory.mktemp("nodes")
    healthy = make_node(base, "spark-head")
    return {
        "healthy": healthy,
        "throttled": make_node(base, "spark-worker", throttled=True, sysfs=healthy["SPARK_SIM_SYSFS"]),
        "mtu1500": make_node(base, "spark-small-mtu", mtu=1500, only="rocep1s0f1"),
    }


@pytest.fixture()
def healthy(nodes) -> dict[str, str]:
    return nodes["healthy"]


# ----------------------------------------------------------------------------- results

def test_healthy_rail_layout_and_numbers(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "-F", "--report_gbits"]
    server, client = pair(tmp_path, healthy, healthy, args, args)
    assert (client.returncode, server.returncode) == (0, 0), (client.stderr, server.stderr)
    assert client.stderr == "" and server.stderr == ""
    row = client.stdout.splitlines()[-2]
    # the row is REPORT_FMT: size, iterations, peak, average, TABs, msgrate
    assert re.fullmatch(r" 65536      5000             \d\d\.\d\d              \d\d\.\d\d  \t\t   0\.\d{6}", row), row
    size, iterations, peak, average, msg_rate = numbers(row)
    assert 97.5 <= average <= 98.5 and average <= peak <= average * 1.002
    assert msg_rate == pytest.approx(average * 1e9 / 8 / 65536 / 1e6, rel=1e-4)
    gid = " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:100:01\n"
    expected_client = (
        DASHES
        + "                    RDMA_Write BW Test\n"
        " Dual-port       : OFF\t\tDevice         : rocep1s0f1\n"
        " Number of qps   : 1\t\tTransport type : IB\n"
        " Connection type : RC\t\tUsing SRQ      : OFF\n"
        " PCIe relax order: ON\n"
        " ibv_wr* API     : ON\n"
        " TX depth        : 128\n"
        " CQ Moderation   : 1\n"
        " Mtu             : 4096[B]\n"
        " Link type       : Ethernet\n"
        " GID index       : 3\n"
        " Max inline data : 0[B]\n"
        " rdma_cm QPs\t : OFF\n"
        " Data ex. method : Ethernet\n"
        + DASHES
        + " local address: LID 0000 QPN <qpn> PSN <psn> RKey <rkey> VAddr <vaddr>\n" + gid
        + " remote address: LID 0000 QPN <qpn> PSN <psn> RKey <rkey> VAddr <vaddr>\n" + gid
        + DASHES
        + " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        + row + "\n" + DASHES)
    assert mask(client.stdout) == expected_client
    banner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
    # the server prints the banner, no TX depth, and the client's report (xchg_bw_reports)
    assert mask(server.stdout) == banner + expected_client.replace(" TX depth        : 128\n", "")


def test_address_lines_follow_perftest_formats(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "--report_gbits"]
    _server, client = pair(tmp_path, healthy, healthy, args, args)
    local = next(line for line in client.stdout.splitlines() if line.startswith(" local address"))
    # %#04x of LID 0 is "0000" (C prints no 0x for zero); %#06x; %#08x; %#016Lx
    assert re.fullmatch(r" local address: LID 0000 QPN 0x[0-9a-f]{4,} PSN (0x[0-9a-f]{4,}|000000) "
                        r"RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14}", local), local


def test_gid_index_auto_selected_like_perftest(tmp_path, healthy):
    """Without -x perftest picks the best GID (get_best_gid_index): IPv4-mapped, RoCE v2: index 5 on this twin."""
    _server, client = pair(tmp_path, healthy, healthy, ["-d", "roceP2p1s0f1"], ["-d", "roceP2p1s0f1"])
    assert client.returncode == 0, client.stderr
    parsed = parse_ib_write_bw(client.stdout)
    assert parsed["gid_index"] == 5 and parsed["local_ipv4"] == "192.168.101.1"
    assert parsed["unit"] == "MiB/sec"


@pytest.mark.parametrize("throttled_end", ["client", "server"])
def test_throttled_end_limits_the_pair(tmp_path, nodes, throttled_end):
    healthy, throttled = nodes["healthy"], nodes["throttled"]
    server_env, client_env = (throttled, healthy) if throttled_end == "server" else (healthy, throttled)
    args = ["-d", "rocep1s0f1", "-x", "3", "-F", "--report_gbits"]
    server, client = pair(tmp_path, server_env, client_env, args, args)
    assert (client.returncode, server.returncode) == (0, 0), client.stderr
    average = parse_ib_write_bw(client.stdout)["gbps_average"]
    assert 12.9 <= average <= 13.3
    assert parse_ib_write_bw(server.stdout)["gbps_average"] == average


@pytest.mark.parametrize("throttled_end", ["client", "server"])
def test_the_throttle_caps_every_rail_of_the_node(tmp_path, nodes, throttled_end):
    """The throttle is the node's NIC, not one port: the other twin moves ~13 Gb/s to another node too."""
    healthy, throttled = nodes["healthy"], nodes["throttled"]
    server_env, client_env = (throttled, healthy) if throttled_end == "server" else (healthy, throttled)
    args = ["-d", "roceP2p1s0f1", "-x", "5", "-F", "--report_gbits"]
    _server, client = pair(tmp_path, server_env, client_env, args, args)
    assert 12.9 <= parse_ib_write_bw(client.stdout)["gbps_average"] <= 13.3


@pytest.mark.parametrize("device", ["rocep1s0f1", "roceP2p1s0f1"])
def test_a_loopback_on_a_throttled_node_reads_healthy(tmp_path, nodes, device):
    """Destination GID = source GID never reaches the wire: the worst case for a check that leans on loopback."""
    throttled = nodes["throttled"]
    _server, client = pair(tmp_path, throttled, throttled, ["-d", device, "--report_gbits"], ["-d", device, "--report_gbits"])
    assert client.returncode == 0, client.stderr
    assert parse_ib_write_bw(client.stdout)["gbps_average"] > 97


# A server descheduled between its banner and its listen(): perftest prints "Waiting for client to connect" before
# ethernet_server_connect() binds, and the stand-in does the same (run(): out(BANNER), then connect()). Under load a
# client started on the banner alone found nothing listening ("Couldn't connect"); the sleep here makes that window
# one second wide, every time.
SLOW_LISTEN = ("import runpy, socket, sys, time\n"
               "real_listen = socket.socket.listen\n"
               "socket.socket.listen = lambda self, *args: (time.sleep(1.0), real_listen(self, *args))[1]\n"
               "sys.argv = sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_the_client_starts_once_the_server_listens_not_at_its_banner(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "--report_gbits"]
    server, client = pair(tmp_path, healthy, healthy, args, args, server_launcher=[sys.executable, "-c", SLOW_LISTEN])
    assert "Waiting for client to connect" in server.stdout
    assert (client.returncode, server.returncode) == (0, 0), client.stderr + server.stderr
    assert 97.5 <= parse_ib_write_bw(client.stdout)["gbps_average"] <= 98.5


def test_mb_per_sec_without_report_gbits(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3"]
    _server, client = pair(tmp_path, healthy, healthy, args, args)
    assert " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n" in client.stdout
    parsed = parse_ib_write_bw(client.stdout)
    assert parsed["unit"] == "MiB/sec"
    assert 11620 <= parsed["bw_average"] <= 11745          # 98 Gb/s = 11682 MiB/s
    assert 97.5 <= parsed["gbps_average"] <= 98.5


def test_duration_mode_is_short_and_counts_the_whole_window(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "-D", "3", "--report_gbits"]
    server, client = pair(tmp_path, healthy, healthy, args, args)
    assert client.seconds < 3                               # -D 3 sleeps at most MAX_SLEEP (the server's start not counted)
    warning = " WARNING: BW peak won't be measured in this run.\n"
    assert client.stdout.startswith(warning) and server.stdout.startswith(warning)
    parsed = parse_ib_write_bw(client.stdout)
    assert parsed["bw_peak"] == 0.0 and not parsed["peak_measured"]
    # margin = 3/4 = 0 -> the whole 3 s window counts
    assert parsed["iterations"] == pytest.approx(parsed["msg_rate"] * 1e6 * 3, rel=1e-5)


def test_four_qps_like_the_spark_capture(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "-q", "4", "--report_gbits"]
    _server, client = pair(tmp_path, healthy, healthy, args, args)
    assert client.stdout.count(" local address:") == 4 and client.stdout.count(" remote address:") == 4
    parsed = parse_ib_write_bw(client.stdout)
    assert (parsed["qps"], parsed["iterations"]) == (4, 20000)


@pytest.mark.parametrize("end, low, high", [("healthy", 80.0, 99.0), ("throttled", 8.0, 25.0)])
def test_nvidias_check_four_qps_five_seconds(tmp_path, nodes, end, low, high):
    """NVIDIA's check: ``ib_write_bw ... -F --report_gbits -q 4 -D 5``; perftest prints one row for all the QPs
    (print_report_bw), no peak in duration mode, an iteration count over the whole window of every QP."""
    args = ["-d", "rocep1s0f1", "-x", "3", "-F", "--report_gbits", "-q", "4", "-D", "5"]
    server, client = pair(tmp_path, nodes[end], nodes["healthy"], args, args)
    assert (client.returncode, server.returncode) == (0, 0), client.stderr
    assert client.stdout.count(" local address:") == 4 and client.stdout.count(" remote address:") == 4
    assert " Number of qps   : 4\t\tTransport type : IB\n" in client.stdout
    rows = [line for line in client.stdout.splitlines() if line.startswith(" 65536 ")]
    assert len(rows) == 1, client.stdout
    parsed = parse_ib_write_bw(client.stdout)
    assert parsed["qps"] == 4 and parsed["bw_peak"] == 0.0
    assert low <= parsed["gbps_average"] <= high
    # margin = 5/4 = 1 -> a 3 s window
    assert parsed["iterations"] == pytest.approx(parsed["msg_rate"] * 1e6 * 3, rel=1e-4)


def test_all_sizes(tmp_path, healthy):
    args = ["-d", "rocep1s0f1", "-x", "3", "-a", "--report_gbits"]
    server, client = pair(tmp_path, healthy, healthy, args, args)
    parsed = parse_ib_write_bw(client.stdout)
    assert [row["bytes"] for row in parsed["rows"]] == [1 << i for i in range(1, 24)]
    assert parsed["cq_moderation"] == 100                    # not disabled with -a (capture: CQ Moderation 100)
    assert parsed["rows"][0]["bw_average"] < 1 < parsed["rows"][-1]["bw_average"]
    assert [row["bytes"] for row in parse_ib_write_bw(server.stdout)["rows"]] == [8388608]


def test_mtu_follows_the_netdev(tmp_path, nodes):
    node = nodes["mtu1500"]
    _server, client = pair(tmp_path, node, node, ["-d", "rocep1s0f1", "-x", "3"], ["-d", "rocep1s0f1", "-x", "3"])
    assert " Mtu             : 1024[B]\n" in client.stdout   # the DGX Spark capture at MTU 1500


# ----------------------------------------------------------------------------- failures

def test_unknown_device(healthy):
    result = run_tool(healthy, "-d", "mlx5_9", "-x", "3", "127.0.0.1")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n"


def test_no_device_at_all(tmp_path, healthy):
    environ = dict(healthy, SPARK_SIM_SYSFS=str(tmp_path / "empty"))
    result = run_tool(environ, "127.0.0.1")
    assert result.returncode == 1
    assert result.stderr == (" Did not detect devices \n If device exists, check if driver is up\n"
                             " Unable to find the Infiniband/RoCE device\n")


def test_port_down(healthy):
    result = run_tool(healthy, "-d", "rocep1s0f0", "127.0.0.1")
    assert result.returncode == 1
    assert result.stderr == (" Port number 1 state is Down\n Couldn't set the link layer\n"
                             " Couldn't get context for the device\n")


def test_empty_gid_index_against_an_ipv4_gid(tmp_path, healthy):
    server, client = pair(tmp_path, healthy, healthy, ["-d", "rocep1s0f1", "-x", "3"], ["-d", "rocep1s0f1", "-x", "9"])
    text = "\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n\n"
    assert (client.returncode, client.stderr) == (1, text)
    assert (server.returncode, server.stderr) == (1, text)
    assert " GID: " + ":".join(["00"] * 16) + "\n" in client.stdout   # an empty entry reads the zero GID


def test_empty_gid_index_on_both_ends(tmp_path, healthy):
    server, client = pair(tmp_path, healthy, healthy, ["-d", "rocep1s0f1", "-x", "9"], ["-d", "rocep1s0f1", "-x", "9"])
    text = "Failed to modify QP <qpn> to RTR\n Unable to Connect the HCA's through the link\n"
    assert (client.returncode, mask(client.stderr)) == (1, text)
    assert server.returncode == 1


def test_no_server(healthy):
    port = free_port()
    started = time.monotonic()
    result = run_tool(healthy, "-d", "rocep1s0f1", "-x", "3", "-p", str(port), "127.0.0.1")
    assert time.monotonic() - started < 3                   # no retry, like ethernet_client_connect
    assert result.returncode == 1
    assert result.stderr == ("Couldn't connect to 127.0.0.1:%d\nUnable to open file descriptor for socket connection"
                             " Unable to init the socket connection\n" % port)


@pytest.mark.parametrize("args, message", [
    (["--frobnicate"], "ib_write_bw: unrecognized option '--frobnicate'\n"),
    (["-0"], "ib_write_bw: invalid option -- '0'\n"),
    (["-d"], "ib_write_bw: option requires an argument -- 'd'\n"),
    (["--report_gbits=yes"], "ib_write_bw: option '--report_gbits' doesn't allow an argument\n"),
])
def test_unknown_option(healthy, args, message):
    result = run_tool(healthy, *args)
    assert result.returncode == 1
    assert result.stderr == (message + " Invalid Command or flag.\n Please check command line and run again.\n\n"
                             " Parser function exited with Error\n")
    assert result.stdout.startswith("Usage:\n  ib_write_bw            start a server and wait for connection\n"
                                    "  ib_write_bw <host>     connect to server at <host>\n\nOptions:\n")


def test_long_option_prefixes(tmp_path, healthy):
    """getopt_long takes unique prefixes (--report_g, --ib-d) and refuses ambiguous ones (--report)."""
    result = run_tool(healthy, "--report")
    assert result.returncode == 1
    assert result.stderr.startswith("ib_write_bw: option '--report' is ambiguous; possibilities: '--report-cycles'")
    args = ["--ib-d=rocep1s0f1", "--gid-index", "3", "--report_g"]
    _server, client = pair(tmp_path, healthy, healthy, args, args)
    assert parse_ib_write_bw(client.stdout)["unit"] == "Gb/sec"


@pytest.mark.parametrize("args, stderr", [
    (["-n", "3"], " Iteration num should be between 5 and 100000000\n Parser function exited with Error\n"),
    (["-s", "0"], " Message Size should be between 1 and 2147483647\n Parser function exited with Error\n"),
    (["-s", "1K", "--size", "2K"], " Duplicated argument: -s \n Parser function exited with Error\n"),
    (["127.0.0.1", "127.0.0.2"], " Invalid Command line. Please check command rerun \n Parser function exited with Error\n"),
    (["-R"], "ib_write_bw: option -R is not simulated by spark-sim\n Parser function exited with Error\n"),
])
def test_parameter_checks(healthy, args, stderr):
    result = run_tool(healthy, *args)
    assert (result.returncode, result.stderr) == (1, stderr)


def test_help_and_version_exit_1_like_perftest(healthy):
    help_run = run_tool(healthy, "-h")
    assert (help_run.returncode, help_run.stderr) == (1, "")
    assert "      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)\n" in help_run.stdout
    version = run_tool(healthy, "-V")
    assert (version.returncode, version.stdout, version.stderr) == (1, "Version: 6.24\n", "")


# ------------------------------------------------------------------- kernel 7.0 with Kexec HandOver (sparksim/kernel.py)

def _kho_node(tmp_path: Path, healthy: dict[str, str], cmdline: str) -> dict[str, str]:
    """The healthy node running the fault's kernel: its stand-in /proc and /boot as the fault and the boot write them."""
    from sparksim import kernel
    proc, boot = tmp_path / "proc", tmp_path / "boot"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text(kernel.KHO_KERNEL + "\n")
    (proc / "cmdline").write_text(cmdline + "\n")
    boot.mkdir()
    (boot / ("config-" + kernel.KHO_KERNEL)).write_text(kernel.KHO_CONFIG)
    return dict(healthy, SPARK_SIM_PROC=str(proc), SPARK_SIM_BOOT_DIR=str(boot))


def test_kho_on_fails_memory_registration_with_enomem_at_both_ends(tmp_path, healthy):
    """perftest's register_memory_region / create_mr / ctx_init texts, exit 1 (write_bw.c main), before the test info."""
    env = _kho_node(tmp_path, healthy, "BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia root=LABEL=spark-sim ro quiet splash")
    args = ["-d", "rocep1s0f1", "-s", "4194304", "-q", "1", "-D", "1", "-F", "--report_gbits"]
    server, client = pair(tmp_path, env, env, args, args)
    expected = ("Couldn't allocate MR with error=12\nfailed to create mr\nFailed to create MR\n"
                " Couldn't create IB resources\n")
    assert (client.returncode, server.returncode) == (1, 1)
    assert client.stderr == expected and server.stderr == expected
    assert "RDMA_Write BW Test" not in client.stdout


def test_kho_off_on_the_command_line_registers(tmp_path, healthy):
    env = _kho_node(tmp_path, healthy, "BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia root=LABEL=spark-sim ro quiet splash kho=off")
    args = ["-d", "rocep1s0f1", "-s", "4194304", "-q", "1", "-D", "1", "-F", "--report_gbits"]
    server, client = pair(tmp_path, env, env, args, args)
    assert (client.returncode, server.returncode) == (0, 0), client.stderr + server.stderr
    assert "RDMA_Write BW Test" in client.stdout


def test_boot_cmdline_follows_etc_default_grub(tmp_path):
    from sparksim import kernel
    grub = tmp_path / "grub"
    assert kernel.boot_cmdline("7.0.0-1019-nvidia", str(grub)).endswith("ro quiet splash")
    grub.write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash kho=off"\nGRUB_CMDLINE_LINUX=""\n')
    line = kernel.boot_cmdline("7.0.0-1019-nvidia", str(grub))
    assert line == "BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia root=LABEL=spark-sim ro quiet splash kho=off"
