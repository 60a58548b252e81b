"""The spark-sim nvidia-smi stand-in against real GB10 captures and nvidia-smi's own behaviour.

Golden tests: for each capture in tests/fixtures/captures/nvidia-smi/ a state describing
that machine (driver, persistence, temperature, power, processes, display,
date) must make the stand-in print the capture body byte for byte. The other
tests drive the executable as a role would, through the state file.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
NODE_LIB = REPO / "sim" / "node" / "usr" / "lib" / "spark-sim"
TOOL = REPO / "sim" / "node" / "usr" / "bin" / "nvidia-smi"

sys.path.insert(0, str(NODE_LIB))

from sparksim import gpu as gpumod  # noqa: E402
from captures import CAPTURES_DIR, captures  # noqa: E402


def capture_body(path: Path) -> tuple[dict[str, str], str]:
    """Split a capture into its header fields (source/expect/note) and the body exactly as captured.

    The header is the leading ``# `` lines and the one blank line after them.
    """
    text = path.read_bytes().decode("utf-8")
    header: dict[str, str] = {}
    position = 0
    while text.startswith("# ", position):
        end = text.index("\n", position)
        key, _sep, value = text[position + 2:end].partition(":")
        header[key.strip()] = value.strip()
        position = end + 1
    if text.startswith("\n", position):
        position += 1
    return header, text[position:]


CAPTURES = captures("nvidia-smi")  # fails at collection when the folder is empty


def _proc(pid: int, kind: str, name: str, mib: int) -> dict[str, Any]:
    return {"pid": pid, "type": kind, "name": name, "used_memory_mib": mib}


# What each captured machine looked like. Long process names are given in full
# (as the node would hold them) so the summary's truncation is exercised.
CAPTURE_STATES: dict[str, dict[str, Any]] = {
    "01-gb10-580.82.09-persistence-off-3procs.txt": {
        "now": "2025-10-03T23:16:52",
        "gpu": {
            "driver_version": "580.82.09", "persistence_mode": False, "temperature_c": 44,
            "power_draw_w": 10.0, "utilization_pct": 0, "display_active": False,
            "processes": [
                _proc(3405, "G", "/usr/lib/xorg/Xorg", 242),
                _proc(3562, "G", "/usr/bin/gnome-shell", 53),
                _proc(214921, "C", "/home/nvidia/miniforge3/envs/rapids-25.10/bin/python", 196),
            ],
        },
    },
    "02-gb10-580.82.09-idle-5W.txt": {
        "now": "2025-10-05T21:26:06",
        "gpu": {
            "driver_version": "580.82.09", "persistence_mode": False, "temperature_c": 38,
            "power_draw_w": 5.4, "utilization_pct": 0, "display_active": False,
            "processes": [
                _proc(3405, "G", "/usr/lib/xorg/Xorg", 242),
                _proc(3562, "G", "/usr/bin/gnome-shell", 50),
            ],
        },
    },
    "03-gb10-580.95.05-no-processes.txt": {
        "now": "2025-12-06T13:53:03",
        "gpu": {
            "driver_version": "580.95.05", "persistence_mode": True, "temperature_c": 40,
            "power_draw_w": 11.2, "utilization_pct": 0, "display_active": False,
            "processes": [],
        },
    },
    "04-gb10-580.95.05-display-on.txt": {
        "now": "2025-11-09T09:26:12",
        "gpu": {
            "driver_version": "580.95.05", "persistence_mode": True, "temperature_c": 45,
            "power_draw_w": 11.0, "utilization_pct": 10, "display_active": True,
            "processes": [
                _proc(4174, "G", "/usr/lib/xorg/Xorg", 84),
                _proc(4399, "G", "/usr/bin/gnome-shell", 125),
                _proc(4761, "G", "/snap/firefox/7182/usr/lib/firefox/firefox", 273),
            ],
        },
    },
}


# --------------------------------------------------------------------------- helpers


def make_state(path: Path, **gpu_fields: Any) -> dict[str, Any]:
    """Write a node state with a default GB10 (overridden by ``gpu_fields``) to ``path``."""
    gpu = gpumod.default_gpu("spark-test")
    gpu.update(gpu_fields)
    state = {"version": 1, "hostname": "spark-test", "gpu": gpu}
    path.write_text(json.dumps(state, indent=2), encoding="utf-8")
    return state


def smi(state_path: Path, *args: str, euid: int | None = 0, now: str | None = "2025-10-03T23:16:52",
        tool: Path = TOOL, direct: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the stand-in against ``state_path``: under this interpreter, or by its shebang (``direct``)."""
    env = dict(os.environ)
    env["SPARK_SIM_STATE"] = str(state_path)
    env.pop("SPARK_SIM_NOW", None)
    env.pop("SPARK_SIM_EUID", None)
    if now is not None:
        env["SPARK_SIM_NOW"] = now
    if euid is not None:
        env["SPARK_SIM_EUID"] = str(euid)
    command = [str(tool)] if direct else [sys.executable, str(tool)]
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, check=False)


def read_gpu(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))["gpu"]


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.json"
    make_state(path)
    return path


# --------------------------------------------------------------------------- golden captures


def test_samples_are_present() -> None:
    assert CAPTURES, "no captures under %s" % (CAPTURES_DIR / "nvidia-smi")


@pytest.mark.parametrize("capture", CAPTURES, ids=[path.name for path in CAPTURES])
def test_summary_matches_capture(capture: Path, tmp_path: Path) -> None:
    if capture.name not in CAPTURE_STATES:
        pytest.fail("no state describes capture %s: add one to CAPTURE_STATES" % capture.name)
    _header, body = capture_body(capture)
    spec = CAPTURE_STATES[capture.name]
    path = tmp_path / "state.json"
    make_state(path, **spec["gpu"])
    result = smi(path, now=spec["now"])
    assert result.returncode == 0, result.stdout
    assert result.stdout == body


@pytest.mark.parametrize("capture", CAPTURES, ids=[path.name for path in CAPTURES])
def test_render_summary_matches_capture_in_process(capture: Path) -> None:
    """The same, through the library (no subprocess): what boot-time tools would call."""
    if capture.name not in CAPTURE_STATES:
        pytest.fail("no state describes capture %s: add one to CAPTURE_STATES" % capture.name)
    _header, body = capture_body(capture)
    spec = CAPTURE_STATES[capture.name]
    gpu = gpumod.default_gpu("spark-test")
    gpu.update(spec["gpu"])
    assert gpumod.render_summary(gpu, gpumod.parse_now(spec["now"])) == body


def test_capture_header_is_stripped_exactly() -> None:
    capture = CAPTURES[0]
    header, body = capture_body(capture)
    assert set(header) >= {"source", "expect", "note"}
    assert not body.startswith("#") and not body.startswith("\n")
    assert body.splitlines()[0].endswith("       ")  # the date line keeps its trailing spaces


# --------------------------------------------------------------------------- summary details


def test_summary_date_line_and_epoch_now(state_file: Path) -> None:
    epoch = str(int(datetime.datetime(2026, 1, 2, 3, 4, 5).timestamp()))
    out = smi(state_file, now=epoch).stdout
    assert out.splitlines()[0] == "Fri Jan  2 03:04:05 2026       "


def test_summary_without_now_uses_the_clock(state_file: Path) -> None:
    first = smi(state_file, now=None).stdout.splitlines()[0]
    parsed = datetime.datetime.strptime(first.strip(), "%a %b %d %H:%M:%S %Y")
    assert abs((datetime.datetime.now() - parsed).total_seconds()) < 120


def test_summary_shows_locked_state_nowhere_but_the_clock(state_file: Path) -> None:
    before = smi(state_file).stdout
    assert smi(state_file, "-lgc", "0,2100").returncode == 0
    assert smi(state_file).stdout == before  # the table has no clock column


def test_process_name_truncation() -> None:
    assert gpumod.summary_process_name("/usr/lib/xorg/Xorg") == "/usr/lib/xorg/Xorg"
    long = "/snap/firefox/7182/usr/lib/firefox/firefox"
    assert gpumod.summary_process_name(long) == ".../7182/usr/lib/firefox/firefox"
    assert len(gpumod.summary_process_name("/" + "x" * 80)) == 32


def test_summary_rows_are_91_wide_with_many_processes(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, processes=[_proc(1234567, "C", "/opt/venv/bin/python3 -m vllm.entrypoints", 110000),
                                _proc(7, "C+G", "x", 0)])
    lines = smi(path).stdout.splitlines()
    assert all(len(line) == 91 for line in lines[1:] if line)
    assert "|    0   N/A  N/A         1234567      C   ...n/python3 -m vllm.entrypoints     110000MiB |" in lines
    assert "|    0   N/A  N/A               7    C+G   " + "x".ljust(32) + "0MiB".rjust(14) + " |" in lines


# --------------------------------------------------------------------------- -lgc / -rgc


def test_lock_and_reset_round_trip_through_the_state_file(state_file: Path) -> None:
    assert smi(state_file, "--query-gpu=clocks.sm", "--format=csv,noheader").stdout == "2405 MHz\n"

    locked = smi(state_file, "-lgc", "0,2100")
    assert locked.returncode == 0
    assert locked.stdout == 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2100)" for GPU 0000000F:01:00.0\nAll done.\n'
    assert read_gpu(state_file)["locked_clocks"] == {"min_mhz": 0, "max_mhz": 2100}
    assert smi(state_file, "--query-gpu=clocks.sm,clocks.gr", "--format=csv,noheader,nounits").stdout == "2080, 2080\n"
    clock_q = smi(state_file, "-q", "-d", "CLOCK").stdout
    assert "        SM                                             : 2080 MHz\n" in clock_q
    assert "        SM                                             : 3003 MHz\n" in clock_q  # Max Clocks unchanged

    reset = smi(state_file, "-rgc")
    assert (reset.returncode, reset.stdout) == (0, "All done.\n")
    assert read_gpu(state_file)["locked_clocks"] is None
    assert smi(state_file, "--query-gpu=clocks.sm", "--format=csv,noheader").stdout == "2405 MHz\n"


def test_lock_long_form_single_value_and_id(state_file: Path) -> None:
    result = smi(state_file, "-i", "0", "--lock-gpu-clocks=1500")
    assert result.returncode == 0
    assert result.stdout.startswith('GPU clocks set to "(gpuClkMin 1500, gpuClkMax 1500)" for GPU 0000000F:01:00.0\n')
    assert read_gpu(state_file)["locked_clocks"] == {"min_mhz": 1500, "max_mhz": 1500}
    assert smi(state_file, "--query-gpu=clocks.current.sm", "--format=csv,noheader,nounits").stdout == "1480\n"
    assert smi(state_file, "--id=0000000F:01:00.0", "--reset-gpu-clocks").returncode == 0
    assert smi(state_file, "-i", "00000000F:01:00.0", "-rgc").returncode == 0


def test_lock_above_the_stock_clock_does_not_lower_it(state_file: Path) -> None:
    assert smi(state_file, "-lgc", "0,3003").returncode == 0
    assert smi(state_file, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "2405\n"
    assert smi(state_file, "-lgc", "2600,3003").returncode == 0
    assert smi(state_file, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "2600\n"


def test_lock_warns_when_persistence_is_off(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, persistence_mode=False)
    result = smi(path, "-lgc", "0,2000")
    assert result.returncode == 0
    assert result.stdout == (
        'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2000)" for GPU 0000000F:01:00.0\n'
        "\n"
        "Warning: persistence mode is disabled on device 0000000F:01:00.0. See the Known Issues section of the "
        "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more information on "
        "how to enable persistence mode.\n"
        "All done.\n"
    )
    assert smi(path, "-rgc").stdout == "All done.\n"


@pytest.mark.parametrize("spec", ["0,3500", "2100,0", "3004"])
def test_lock_out_of_range_is_refused(state_file: Path, spec: str) -> None:
    result = smi(state_file, "-lgc", spec)
    assert result.returncode == 2
    assert result.stdout == (
        "Unable to set locked GPU clocks for GPU 0000000F:01:00.0: Invalid Argument\n"
        "Terminating early due to previous errors.\n"
    )
    assert read_gpu(state_file)["locked_clocks"] is None


@pytest.mark.parametrize("spec", ["abc", "0,fast", "0,", ",2100", "0,2100,2200", "-5,2100"])
def test_lock_unparsable_values(state_file: Path, spec: str) -> None:
    result = smi(state_file, "-lgc", spec)
    assert result.returncode == 2
    assert result.stdout == "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    assert read_gpu(state_file)["locked_clocks"] is None


def test_lock_tdp_keyword(state_file: Path) -> None:
    result = smi(state_file, "--lock-gpu-clocks=tdp,tdp")
    assert result.stdout.startswith('GPU clocks set to "(gpuClkMin tdp, gpuClkMax tdp)" for GPU 0000000F:01:00.0\n')
    assert read_gpu(state_file)["locked_clocks"] == {"min_mhz": 2418, "max_mhz": 2418}


@pytest.mark.parametrize("args", [("-lgc", "0,2100"), ("-rgc",)])
def test_clock_changes_need_root(state_file: Path, args: tuple[str, ...]) -> None:
    smi(state_file, "-lgc", "0,2000")  # as root: a lock the non-root reset must not clear
    result = smi(state_file, *args, euid=1000)
    assert result.returncode == 4
    assert result.stdout == (
        "The current user does not have permission to change clocks for GPU 0000000F:01:00.0.\n"
        "Terminating early due to previous errors.\n"
    )
    assert read_gpu(state_file)["locked_clocks"] == {"min_mhz": 0, "max_mhz": 2000}


def test_wrong_gpu_id(state_file: Path) -> None:
    for wanted in ("1", "00000000:01:00.0", "GPU-00000000-0000-0000-0000-000000000000"):
        result = smi(state_file, "-i", wanted, "-lgc", "0,2100")
        assert (result.returncode, result.stdout) == (6, "No devices were found\n")
    assert read_gpu(state_file)["locked_clocks"] is None
    uuid = read_gpu(state_file)["uuid"]
    assert smi(state_file, "-i", uuid, "-L").stdout == "GPU 0: NVIDIA GB10 (UUID: %s)\n" % uuid


def test_state_file_write_is_atomic_and_keeps_other_keys(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = make_state(path)
    state["hcas"] = [{"name": "rocep1s0f1"}]
    path.write_text(json.dumps(state), encoding="utf-8")
    assert smi(path, "-lgc", "0,2100").returncode == 0
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["hcas"] == [{"name": "rocep1s0f1"}]
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


# --------------------------------------------------------------------------- boot


def test_apply_boot_drops_the_lock_and_compute_processes() -> None:
    gpu = gpumod.default_gpu("spark-a")
    gpu["locked_clocks"] = {"min_mhz": 0, "max_mhz": 2100}
    gpu["processes"] = [_proc(1, "G", "/usr/lib/xorg/Xorg", 80), _proc(2, "C", "python", 900)]
    gpu["persistence_mode"] = False
    state = {"hostname": "spark-a", "gpu": gpu}
    lines = gpumod.apply_boot(state)
    assert lines == [
        "gpu: locked clocks 0,2100 MHz dropped (nvidia-smi -lgc does not survive a reboot)",
        "gpu: 1 compute process(es) ended by the reboot",
        "gpu: persistence mode enabled at boot",
    ]
    assert gpu["locked_clocks"] is None
    assert [p["pid"] for p in gpu["processes"]] == [1]
    assert gpu["persistence_mode"] is True
    assert gpumod.current_sm_clock(gpu) == 2405
    assert gpumod.apply_boot(state) == []  # nothing left to undo


def test_apply_boot_without_gpu_is_a_no_op() -> None:
    assert gpumod.apply_boot({"hostname": "x"}) == []


def test_boot_then_query_reads_the_stock_clock(state_file: Path) -> None:
    smi(state_file, "-lgc", "0,2100")
    state = json.loads(state_file.read_text(encoding="utf-8"))
    gpumod.apply_boot(state)
    state_file.write_text(json.dumps(state), encoding="utf-8")
    assert smi(state_file, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "2405\n"


def test_default_gpu() -> None:
    gpu = gpumod.default_gpu("spark-head")
    assert gpu["name"] == "NVIDIA GB10" and gpu["bus_id"] == "0000000F:01:00.0"
    assert gpu["driver_version"] == "580.173.02" and gpu["cuda_version"] == "13.0"
    assert gpu["uuid"] == gpumod.default_gpu("spark-head")["uuid"] != gpumod.default_gpu("spark-worker")["uuid"]
    assert gpu["uuid"].startswith("GPU-") and len(gpu["uuid"]) == 40
    assert gpu["locked_clocks"] is None and gpu["processes"] == []
    json.dumps(gpu)  # storable as is


# --------------------------------------------------------------------------- --query-gpu


def test_query_headers_and_values(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, power_draw_w=5.04, temperature_c=39)
    fields = ("name,driver_version,pci.bus_id,persistence_mode,temperature.gpu,power.draw,power.limit,"
              "memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.gr,clocks.max.gr,uuid,index,count,"
              "compute_cap,utilization.gpu,pstate,clocks_event_reasons.active,clocks_throttle_reasons.sw_power_cap")
    result = smi(path, "--query-gpu=" + fields, "--format=csv")
    assert result.returncode == 0
    header, row = result.stdout.splitlines()
    assert header == (
        "name, driver_version, pci.bus_id, persistence_mode, temperature.gpu, power.draw [W], power.limit [W], "
        "memory.total [MiB], memory.used [MiB], clocks.current.sm [MHz], clocks.max.sm [MHz], "
        "clocks.current.graphics [MHz], clocks.max.graphics [MHz], uuid, index, count, compute_cap, "
        "utilization.gpu [%], pstate, clocks_event_reasons.active, clocks_event_reasons.sw_power_cap"
    )
    uuid = read_gpu(path)["uuid"]
    assert row == (
        "NVIDIA GB10, 580.173.02, 0000000F:01:00.0, Enabled, 39, 5.04 W, [N/A], [N/A], [N/A], 2405 MHz, "
        "3003 MHz, 2405 MHz, 3003 MHz, %s, 0, 1, 12.1, 0 %%, P0, 0x0000000000000000, Not Active" % uuid
    )


def test_query_noheader_nounits(state_file: Path) -> None:
    result = smi(state_file, "--query-gpu=index,gpu_name,pci.bus_id,driver_version,compute_cap,memory.total,"
                 "power.draw,clocks.max.sm", "--format=csv,noheader,nounits")
    assert result.stdout == "0, NVIDIA GB10, 0000000F:01:00.0, 580.173.02, 12.1, [N/A], 11.00, 3003\n"
    spaced = smi(state_file, "--query-gpu", "name", "--format", "csv,noheader")
    assert spaced.stdout == "NVIDIA GB10\n"


def test_query_persistence_disabled_and_alias_header(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, persistence_mode=False)
    assert smi(path, "--query-gpu=persistence_mode,gpu_name", "--format=csv").stdout == \
        "persistence_mode, name\nDisabled, NVIDIA GB10\n"


@pytest.mark.parametrize("fields", ["cuda_version", "name,cuda_version", "clocks.applications.sm"])
def test_query_unknown_field(state_file: Path, fields: str) -> None:
    result = smi(state_file, "--query-gpu=" + fields, "--format=csv")
    bad = fields.split(",")[-1]
    assert result.returncode == 2
    assert result.stdout == 'Field "%s" is not a valid field to query.\n\n' % bad


@pytest.mark.parametrize("args", [
    ("--query-gpu=name",),
    ("--query-gpu=name", "--format=json"),
    ("--format=csv",),
    ("-q", "--query-gpu=name", "--format=csv"),
    ("--bogus",),
    ("-lgc",),
    ("-d", "CLOCK"),
    ("-q", "-d", "BOGUS"),
    ("-pl", "lots"),
])
def test_invalid_combinations(state_file: Path, args: tuple[str, ...]) -> None:
    result = smi(state_file, *args)
    assert (result.returncode, result.stdout) == (
        2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")


# --------------------------------------------------------------------------- -q


def test_full_query_layout_on_recent_driver(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, processes=[_proc(2573, "G", "/usr/lib/xorg/Xorg", 276)])
    out = smi(path, "-q").stdout
    assert out.startswith("\n==============NVSMI LOG==============\n\nTimestamp" + " " * 46 + ": Fri Oct  3 23:16:52 2025\n")
    assert out.endswith("\n\n")
    lines = out.splitlines()
    for expected in [
        "Driver Version                                         : 580.173.02",
        "CUDA Version                                           : 13.0",
        "Attached GPUs                                          : 1",
        "GPU 0000000F:01:00.0",
        "    Product Name                                       : NVIDIA GB10",
        "    Persistence Mode                                   : Enabled",
        "    Addressing Mode                                    : ATS",
        "        Bus Id                                         : 0000000F:01:00.0",
        "    Clocks Event Reasons",
        "            HW Thermal Slowdown                        : Not Active",
        "        Total                                          : N/A",
        "    Max Clocks",
        "        Graphics                                       : 3003 MHz",
        "    Applications Clocks",
        "        Graphics                                       : 2418 MHz",
        "        Current Power Limit                            : N/A",
        "        Process ID                        : 2573",
        "            Name                          : ............./Xorg",
    ]:
        assert expected in lines, expected
    sections = [line.strip() for line in lines if line.startswith("    ") and not line.startswith("     ")
                and ":" not in line]
    assert sections.index("Clocks Event Reasons") < sections.index("Clocks") < sections.index("Max Clocks")


def test_query_on_older_driver_uses_the_narrow_layout(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, driver_version="580.95.05", event_counters_us={"sw_power_capping": 50284264713})
    out = smi(path, "-q", "-d", "PERFORMANCE", now="2025-11-24T19:48:06").stdout
    lines = out.splitlines()
    assert lines[3:9] == [
        "Timestamp                                 : Mon Nov 24 19:48:06 2025",
        "Driver Version                            : 580.95.05",
        "CUDA Version                              : 13.0",
        "",
        "Attached GPUs                             : 1",
        "GPU 0000000F:01:00.0",
    ]
    assert lines[9] == "    Performance State                     : P0"
    assert "        SW Power Capping                  : 50284264713 us" in lines
    assert lines[-2:] == ["    Sparse Operation Mode                 : N/A", ""]


def test_query_display_filter(state_file: Path) -> None:
    out = smi(state_file, "-q", "-d", "CLOCK").stdout
    body = out.split("GPU 0000000F:01:00.0\n", 1)[1]
    headings = [line.strip() for line in body.splitlines() if line and ":" not in line]
    assert headings == ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
                        "Max Clocks", "Max Customer Boost Clocks", "Clock Policy"]
    both = smi(state_file, "-q", "-d", "clock,performance", "-i", "0").stdout
    assert "    Clocks Event Reasons\n" in both and "    Max Clocks\n" in both
    assert "Product Name" not in both


def test_event_reasons_follow_the_state(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    make_state(path, event_reasons_active=0x24)
    out = smi(path, "-q", "-d", "PERFORMANCE").stdout
    assert "        SW Power Cap                                   : Active\n" in out
    assert "        SW Thermal Slowdown                            : Active\n" in out
    assert "        Idle                                           : Not Active\n" in out
    csv = smi(path, "--query-gpu=clocks_event_reasons.active,clocks_event_reasons.sw_thermal_slowdown",
              "--format=csv,noheader").stdout
    assert csv == "0x0000000000000024, Active\n"


# --------------------------------------------------------------------------- other forms


def test_power_limit_is_refused(state_file: Path) -> None:
    for euid in (0, 1000):
        result = smi(state_file, "-pl", "100", euid=euid)
        assert result.returncode == 3
        assert result.stdout == ("Changing power management limit is not supported in current scope for GPU: "
                                 "0000000F:01:00.0.\nAll done.\n")


def test_persistence_mode(state_file: Path) -> None:
    assert smi(state_file, "-pm", "1").stdout == "Persistence mode is already Enabled for GPU 0000000F:01:00.0.\nAll done.\n"
    assert smi(state_file, "-pm", "0").stdout == "Disabled Legacy persistence mode for GPU 0000000F:01:00.0.\nAll done.\n"
    assert read_gpu(state_file)["persistence_mode"] is False
    denied = smi(state_file, "-pm", "1", euid=1000)
    assert denied.returncode == 4
    assert denied.stdout.startswith("Unable to set persistence mode for GPU 0000000F:01:00.0: Insufficient Permissions\n")
    assert read_gpu(state_file)["persistence_mode"] is False


def test_version_and_help(state_file: Path) -> None:
    assert smi(state_file, "--version").stdout == (
        "NVIDIA-SMI version  : 580.173.02\nNVML version        : 580.173\n"
        "DRIVER version      : 580.173.02\nCUDA Version        : 13.0\n"
    )
    helped = smi(state_file, "-h")
    assert helped.returncode == 0 and helped.stdout.startswith("NVIDIA System Management Interface -- v580.173.02\n")
    assert gpumod.nvml_version("580.95.05") == "580.95" and gpumod.nvml_version("580.142") == "580.142"


def test_no_driver(tmp_path: Path) -> None:
    missing = smi(tmp_path / "absent.json")
    assert missing.returncode == 9
    assert missing.stdout == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                              "Make sure that the latest NVIDIA driver is installed and running.\n")
    path = tmp_path / "state.json"
    make_state(path, driver_loaded=False)
    assert smi(path, "--query-gpu=name", "--format=csv").returncode == 9


def test_executable_finds_its_library_through_a_symlink(state_file: Path, tmp_path: Path) -> None:
    assert os.access(TOOL, os.X_OK)
    assert TOOL.read_text(encoding="utf-8").startswith("#!/usr/bin/python3\n")
    link = tmp_path / "bin" / "nvidia-smi"
    link.parent.mkdir()
    link.symlink_to(TOOL)
    assert smi(state_file, "-L", tool=link, direct=True).stdout.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")
    assert smi(state_file, "-lgc", "0,2100", direct=True).returncode == 0
