"""The unit tests' network guard (conftest.py + netguard/sitecustomize.py) refuses outside addresses.

The refused address is TEST-NET-1 (192.0.2.1, RFC 5737): the guard refuses before the kernel sees a
packet, so nothing leaves even if the guard were broken in a way this test did not see.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import spark_netguard as netguard


def test_loopback_is_allowed():
    assert netguard.outside(("127.0.0.1", 9)) is None
    assert netguard.outside(("::1", 9, 0, 0)) is None
    assert netguard.outside(("localhost", 9)) is None
    assert netguard.outside("/run/some.sock") is None


@pytest.mark.parametrize("address", [("192.0.2.1", 9), ("192.168.100.2", 18515), ("10.77.1.11", 22),
                                     ("2001:db8::1", 9, 0, 0), ("example.invalid", 80)])
def test_outside_addresses_are_named(address):
    assert netguard.outside(address) == address[0]


def test_connect_outside_is_refused_in_process():
    log = os.environ["SPARK_NETGUARD_LOG"]
    before = os.path.getsize(log)
    with socket.socket() as sock:
        with pytest.raises(PermissionError, match="192.0.2.1"):
            sock.connect(("192.0.2.1", 9))
    # The refusal is logged; undo it so this test itself passes the per-test check.
    with open(log, "r+", encoding="utf-8") as handle:
        handle.seek(before)
        assert "192.0.2.1" in handle.read()
        handle.truncate(before)


def test_connect_outside_is_refused_in_a_subprocess(tmp_path):
    log = tmp_path / "child.log"
    environ = dict(os.environ, SPARK_NETGUARD_LOG=str(log))
    code = "import socket\ns = socket.socket()\ntry:\n    s.connect(('192.0.2.1', 9))\nexcept PermissionError as e:\n    print(e)\n"
    proc = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "netguard" in proc.stdout and "192.0.2.1" in proc.stdout
    assert "192.0.2.1" in log.read_text()
