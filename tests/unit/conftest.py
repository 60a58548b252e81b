"""Session-wide guards of the unit tests.

Test traffic goes only to loopback (DEVELOPERS.md): netguard/sitecustomize.py refuses any other
connect in this process and, through PYTHONPATH, in the Python subprocesses the tests start; every
refusal is logged, and the test during which one happened fails naming the address.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

NETGUARD_DIR = Path(__file__).resolve().parent / "netguard"
# The guard, loaded from its file under a name of its own (any other sitecustomize is left alone);
# tests import it as ``spark_netguard``.
_spec = importlib.util.spec_from_file_location("spark_netguard", NETGUARD_DIR / "sitecustomize.py")
netguard = importlib.util.module_from_spec(_spec)
sys.modules["spark_netguard"] = netguard
_spec.loader.exec_module(netguard)


@pytest.fixture(scope="session", autouse=True)
def _netguard_session(tmp_path_factory):
    log = tmp_path_factory.mktemp("netguard") / "refused.log"
    log.touch()
    os.environ["SPARK_NETGUARD_LOG"] = str(log)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(NETGUARD_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    netguard.install()
    yield log


@pytest.fixture(autouse=True)
def _netguard_per_test(_netguard_session):
    log = _netguard_session
    before = log.stat().st_size
    yield
    with open(log, encoding="utf-8") as handle:
        handle.seek(before)
        refused = handle.read().strip()
    if refused:
        pytest.fail("this test opened (or tried to open) a connection outside loopback: %s" % refused, pytrace=False)
