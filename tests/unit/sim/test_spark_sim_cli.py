"""sim/spark-sim stops early, with a message that says what to do, on bad
inventory input, a missing docker engine, and name or subnet clashes with
leftovers; `down` removes leftovers of a failed run. The clash cases talk to
the real docker engine (the test command starts one) but build nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CLI = REPO / "sim" / "spark-sim"
NAME = "pytest-sim-%d" % os.getpid()
MGMT = "10.77.250.0/24"
FABRIC = "192.168.250.0/24"


def write_inventory(tmp_path: Path, head_ip: str = "10.77.250.11", worker_fabric: str = "192.168.250.2",
                    mgmt: str = MGMT, fabric: str = FABRIC) -> Path:
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(textwrap.dedent("""\
        all:
          children:
            spark:
              children:
                spark_head:
                  hosts:
                    spark-head:
                      ansible_host: %s
                      dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: 192.168.250.1}]
                spark_workers:
                  hosts:
                    spark-worker:
                      ansible_host: 10.77.250.12
                      dgxspark_fabric_rails: [{netdev: enp1s0f1np1, ipv4: %s}]
        """ % (head_ip, worker_fabric)))
    (inv / "group_vars" / "all" / "sim.yml").write_text(
        "spark_sim_name: %s\nspark_sim_mgmt_subnet: %s\nspark_sim_fabric_subnets: [%s]\n" % (NAME, mgmt, fabric))
    return inv


def sim(inv: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    bindir = str(Path(sys.executable).parent)
    full_env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), **(env or {}))
    return subprocess.run([sys.executable, str(CLI), "-i", str(inv), *args], capture_output=True, text=True, env=full_env,
                          timeout=120, check=False)


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.fixture()
def clean_networks():
    yield
    for net in ("%s-mgmt" % NAME, "%s-fabric0" % NAME, "%s-other" % NAME):
        docker("network", "rm", net, check=False)


def test_management_address_outside_the_subnet_is_named(tmp_path):
    proc = sim(write_inventory(tmp_path, head_ip="10.99.0.11"), "status")
    assert proc.returncode == 1
    assert "host spark-head: ansible_host 10.99.0.11 is outside spark_sim_mgmt_subnet 10.77.250.0/24" in proc.stderr


def test_fabric_address_outside_the_fabric_subnets_is_named(tmp_path):
    proc = sim(write_inventory(tmp_path, worker_fabric="192.168.99.2"), "status")
    assert proc.returncode == 1
    assert "host spark-worker: rail 0 address 192.168.99.2 is in none of spark_sim_fabric_subnets (192.168.250.0/24" in proc.stderr


def test_no_docker_engine_says_how_to_start_one(tmp_path):
    proc = sim(write_inventory(tmp_path), "up", env={"DOCKER_HOST": "unix://%s/none.sock" % tmp_path})
    assert proc.returncode == 1
    assert "no docker engine answers" in proc.stderr
    assert "start it" in proc.stderr


def test_foreign_network_with_our_name_stops_up(tmp_path, clean_networks):
    docker("network", "create", "--subnet", MGMT, "%s-mgmt" % NAME)
    proc = sim(write_inventory(tmp_path), "up")
    assert proc.returncode == 1
    assert "docker network %s-mgmt already exists" % NAME in proc.stderr
    assert "is not this sim's" in proc.stderr and "docker network rm" in proc.stderr
    assert "created node" not in proc.stderr


def test_overlapping_subnet_of_another_network_stops_up(tmp_path, clean_networks):
    docker("network", "create", "--subnet", "10.77.250.0/25", "%s-other" % NAME)
    proc = sim(write_inventory(tmp_path), "up")
    assert proc.returncode == 1
    assert "subnet 10.77.250.0/24 of %s-mgmt overlaps docker network %s-other" % (NAME, NAME) in proc.stderr
    assert "spark-sim down" in proc.stderr


def test_down_removes_leftovers_of_a_failed_run(tmp_path, clean_networks):
    docker("network", "create", "--subnet", FABRIC, "--label", "io.dgxspark.sim=%s" % NAME, "%s-fabric0" % NAME)
    empty = subprocess.run(["docker", "import", "-", "%s-empty:latest" % NAME], input=b"\0" * 1024, capture_output=True, check=False)
    assert empty.returncode == 0, empty.stderr
    assert docker("image", "inspect", "%s-empty:latest" % NAME, check=False).returncode == 0
    docker("create", "--name", "%s-spark-head" % NAME, "--label", "io.dgxspark.sim=%s" % NAME,
           "--network", "%s-fabric0" % NAME, "%s-empty:latest" % NAME, "/none")
    assert docker("container", "inspect", "%s-spark-head" % NAME, check=False).returncode == 0
    proc = sim(write_inventory(tmp_path), "down")
    assert proc.returncode == 0, proc.stderr
    assert docker("network", "inspect", "%s-fabric0" % NAME, check=False).returncode != 0
    assert docker("container", "inspect", "%s-spark-head" % NAME, check=False).returncode != 0
    docker("image", "rm", "%s-empty:latest" % NAME, check=False)


def test_an_unknown_fault_names_the_known_ones(tmp_path):
    proc = sim(write_inventory(tmp_path), "fault", "spark-worker", "throttled")
    assert proc.returncode == 2
    assert "invalid choice: 'throttled'" in proc.stderr
    assert "'throttled-link'" in proc.stderr and "'throttled-link-persistent'" in proc.stderr and "'clear'" in proc.stderr


def test_a_fault_on_an_unknown_host_is_named(tmp_path):
    proc = sim(write_inventory(tmp_path), "fault", "spark-ghost", "throttled-link")
    assert proc.returncode == 1
    assert "no host spark-ghost in inventory" in proc.stderr and "spark-head, spark-worker" in proc.stderr


def test_faults_are_state_edits_that_clear_undoes():
    """The throttle faults set only the node NIC's throttle keys, and `clear` resets exactly those."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("spark_sim_cli", str(CLI))
    spec = importlib.util.spec_from_loader("spark_sim_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    for name in ("throttled-link", "throttled-link-persistent"):
        fault = module.FAULTS[name]
        assert set(fault.on) == set(fault.off) == {"nic.throttled", "nic.throttle_persists"}, name
        assert fault.on["nic.throttled"] is True and fault.off == {"nic.throttled": False, "nic.throttle_persists": False}
        assert fault.flap_links, name                  # a cable seated while the node ran: the links went down and up
    assert module.FAULTS["throttled-link"].on["nic.throttle_persists"] is False
    assert module.FAULTS["throttled-link-persistent"].on["nic.throttle_persists"] is True
