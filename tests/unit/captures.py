"""Shared helpers of the RDMA stand-in tests: the real captures, their paste damage, the tools.

Captures live in the repository, tests/fixtures/captures/<tool>/*.txt (see the
README there): ``# `` header lines (source, expect, note), one blank line, then
the body exactly as captured. A capture that is missing or unreadable is a test
failure, never a skip: ``capture()`` fails naming the file, ``captures()`` fails
when a tool's folder is empty, so no parametrized set can come out empty.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "sim" / "node" / "usr"
NODE_LIB = NODE / "lib" / "spark-sim"
TOOLS = {
    "show_gids": NODE / "sbin" / "show_gids",
    "ibstat": NODE / "sbin" / "ibstat",
    "ethtool": NODE / "sbin" / "ethtool",
    "ibdev2netdev": NODE / "bin" / "ibdev2netdev",
}

if str(NODE_LIB) not in sys.path:
    sys.path.insert(0, str(NODE_LIB))

from sparksim import rdma  # noqa: E402


CAPTURES_DIR = REPO / "tests" / "fixtures" / "captures"


class MissingCapture(AssertionError):
    """A capture a test asked for is not in tests/fixtures/captures (a failure, never a skip)."""


def samples_dir() -> Path:
    """The folder of the real captures (tests/fixtures/captures)."""
    return CAPTURES_DIR


def captures(tool: str) -> list[Path]:
    """The capture files of one tool, sorted; raises MissingCapture when there are none."""
    directory = CAPTURES_DIR / tool
    found = sorted(directory.glob("*.txt")) if directory.is_dir() else []
    if not found:
        raise MissingCapture("no captures of %s under %s" % (tool, directory))
    return found


def capture(tool: str, name: str) -> Path:
    """One capture by file name; raises MissingCapture naming it when it is absent or unreadable."""
    path = CAPTURES_DIR / tool / name
    try:
        path.read_bytes()
    except OSError as error:
        raise MissingCapture("capture %s/%s is missing or unreadable: %s" % (tool, name, error)) from None
    return path


def capture_body(path: Path) -> str:
    """The body of a capture: everything after the ``# `` header lines and the blank line."""
    text = path.read_bytes().decode("utf-8")
    position = 0
    while text.startswith("# ", position):
        position = text.index("\n", position) + 1
    if text.startswith("\n", position):
        position += 1
    return text[position:]


# Paste damage, applied to the stand-in's output before comparing with a damaged capture.

def expand_tabs(text: str) -> str:
    """TABs expanded to spaces at 8-column stops (what an editor paste did)."""
    return "\n".join(line.expandtabs(8) for line in text.split("\n"))


def strip_trailing_blanks(text: str) -> str:
    """Trailing spaces dropped from every line (the paste trimmed a trailing TAB)."""
    return "\n".join(line.rstrip(" ") for line in text.split("\n"))


def crlf(text: str) -> str:
    """Windows line endings (the source markdown was edited on Windows)."""
    return text.replace("\n", "\r\n")


def comment_out(text: str) -> str:
    """Every line prefixed with '# ' (the author pasted the output as shell comments)."""
    return "".join("# " + line for line in text.splitlines(keepends=True))


def normalise_pids(text: str) -> str:
    """``ibpanic: [5896]`` -> ``ibpanic: [PID]``: a real run's pid cannot be reproduced."""
    return re.sub(r"(ib(?:panic|warn)): \[\d+\]", r"\1: [PID]", text)


def run_tool(tool: str, *args: str, sysfs: Path, env: dict[str, str] | None = None,
             state: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a stand-in as a role would, against ``sysfs`` (and ``state`` if given).

    The tool runs through its shebang; $SPARK_SIM_TOOL_PYTHON runs it with that
    interpreter instead (e.g. a Python 3.13 like the node's).
    """
    interpreter = os.environ.get("SPARK_SIM_TOOL_PYTHON")
    command = ([interpreter] if interpreter else []) + [str(TOOLS[tool]), *args]
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("LC_", "LANG"))}
    environ["SPARK_SIM_SYSFS"] = str(sysfs)
    environ["SPARK_SIM_STATE"] = str(state) if state else str(sysfs.parent / "no-state.json")
    environ.update(env or {})
    return subprocess.run(command, capture_output=True, env=environ, check=False)


def write_tree(tmp_path: Path, hcas: list[dict[str, Any]], **state: Any) -> Path:
    """write_sysfs() of a state holding ``hcas``; returns the sysfs root."""
    root = tmp_path / "sys"
    rdma.write_sysfs({"hostname": "capture", "hcas": hcas, **state}, str(root))
    return root


# Hardware description helpers (the state schema of sparksim/state.py).

def hca(name: str, ports: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"name": name, "ca_type": "MT4119", "fw": "16.27.1016", "hw_version": "0",
            "node_guid": "0x0", **fields, "ports": ports}


def roce_port(netdev: str, mac: str, ipv4: list[str] | None = None, up: bool = True,
              **fields: Any) -> dict[str, Any]:
    """A RoCE port whose IPv4 addresses take GID pairs 2/3, 4/5, ... in order."""
    pairs = [(address, 2 + 2 * i, 3 + 2 * i) for i, address in enumerate(ipv4 or [])]
    return {"port": 1, "netdev": netdev, "link_layer": "Ethernet", "state": "up" if up else "down",
            "speed_mbps": 100000, "mac": mac, "gids": rdma.build_gid_table(netdev, mac, pairs), **fields}


def ib_port(gids: list[str], netdev: str | None = None, up: bool = True, number: int = 1,
            **fields: Any) -> dict[str, Any]:
    """An InfiniBand (or iWARP/OPA) port: v1 GIDs without a netdev."""
    table = [{"index": i, "gid": gid, "type": rdma.TYPE_V1, "ndev": None} for i, gid in enumerate(gids)]
    return {"port": number, "netdev": netdev, "link_layer": "InfiniBand", "state": "up" if up else "down",
            "gids": table, **fields}


def gid(index: int, value: str, ndev: str | None, v2: bool = False) -> dict[str, Any]:
    return {"index": index, "gid": value, "type": rdma.TYPE_V2 if v2 else rdma.TYPE_V1, "ndev": ndev}


def read_capture(path: Path) -> tuple[list[str], str]:
    """``(header lines, body)`` of a capture; the body is byte-exact (see capture_body)."""
    text = path.read_bytes().decode("utf-8")
    header = [line for line in text[: len(text) - len(capture_body(path))].split("\n") if line.startswith("# ")]
    return header, capture_body(path)
