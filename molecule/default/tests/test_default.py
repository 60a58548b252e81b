"""Live state of the molecule default scenario's sim pair after converge,
idempotence, check and the worker's reboot (side_effect).

Expected values come from this scenario's inventory, not from constants, so a
drift between the inventory and what the sim built fails here.
"""

import json
import os
import re

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _inventory_hosts():
    with open(os.path.join(SCENARIO, "inventory", "hosts.yml"), encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    hosts = {}
    for group in ("spark_head", "spark_workers"):
        for name, hvars in inv["all"]["children"]["spark"]["children"][group]["hosts"].items():
            hosts[name] = dict(hvars, group=group)
    return hosts


HOSTS = _inventory_hosts()


@pytest.fixture()
def expected(host):
    return HOSTS[host.backend.get_hostname()]


def test_systemd_is_running(host):
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_boot_unit_ran(host):
    unit = host.service("spark-sim-boot")
    assert unit.is_enabled
    assert unit.is_running  # oneshot with RemainAfterExit: active (exited)
    assert re.fullmatch(r"[0-9a-f-]{36}", host.file("/run/spark-sim/boot_id").content_string.strip())


def test_worker_was_rebooted_once_head_never(host, expected):
    state = json.loads(host.file("/var/lib/spark-sim/state.json").content_string)
    assert state["boot"]["count"] == (2 if expected["group"] == "spark_workers" else 1)


def test_fabric_netdev_carries_the_fabric_address(host, expected):
    rail = expected["dgxspark_fabric_rails"][0]
    iface = host.interface(rail["netdev"])
    assert iface.exists
    assert rail["ipv4"] in iface.addresses


def test_show_gids_lists_the_fabric_address_at_this_nodes_index(host, expected):
    rail = expected["dgxspark_fabric_rails"][0]
    out = host.check_output("show_gids")
    rows = [line.split("\t") for line in out.splitlines()]
    v2 = [r for r in rows if len(r) == 7 and r[4].strip() == rail["ipv4"] and r[5] == "v2"]
    assert len(v2) == 1, out
    assert int(v2[0][2]) == expected["spark_sim_gid_index_v2"]
    assert v2[0][6] == rail["netdev"]
    assert out.splitlines()[-1] == "n_gids_found=%d" % (len(rows) - 3)


def test_ibdev2netdev_shows_the_cabled_rail_up(host, expected):
    rail = expected["dgxspark_fabric_rails"][0]
    out = host.check_output("ibdev2netdev")
    assert re.search(r"^\S+ port 1 ==> %s \(Up\)$" % re.escape(rail["netdev"]), out, re.M), out


def test_nvidia_smi_reports_the_gb10(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader")
    name, driver = [f.strip() for f in out.split(",")]
    assert name == "NVIDIA GB10"
    assert re.fullmatch(r"580\.\d+\.\d+", driver)


def test_controller_ssh_lands_as_the_unprivileged_user(host):
    assert host.file("/home/spark/.ssh/authorized_keys").mode == 0o600
    assert host.file("/home/spark/.ssh/authorized_keys").user == "spark"
