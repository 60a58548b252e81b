"""Live state after the nic scenario: the resolver is installed from the
collection's parser, the serving stand-in resolved the NCCL env at the last
boot from the live table, and the rails are healthy again."""

import os
import re

import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))

with open(os.path.join(SCENARIO, "inventory", "hosts.yml"), encoding="utf-8") as handle:
    _INV = yaml.safe_load(handle)["all"]["children"]["spark"]["children"]
HOSTS = {name: hv for group in _INV.values() for name, hv in group["hosts"].items()}


def _live_index(host, ipv4):
    for line in host.check_output("show_gids").splitlines():
        fields = line.split("\t")
        if len(fields) == 7 and fields[4].strip() == ipv4 and fields[5] == "v2":
            return fields[2]
    raise AssertionError("no v2 GID for %s" % ipv4)


def test_resolver_ships_the_collections_parser(host):
    installed = host.file("/usr/local/lib/dgxspark/roce_gids.py").content_string
    with open(os.path.join(PROJECT, "plugins", "module_utils", "roce_gids.py"), encoding="utf-8") as handle:
        assert installed == handle.read()
    assert host.file("/usr/local/sbin/dgxspark-nccl-env").mode == 0o755


def test_env_file_matches_the_live_gid_table(host):
    ipv4 = HOSTS[host.backend.get_hostname()]["dgxspark_fabric_rails"][0]["ipv4"]
    env = dict(line.split("=", 1) for line in host.file("/run/dgxspark/nccl.env").content_string.splitlines()
               if "=" in line and not line.startswith("#"))
    assert env["NCCL_IB_GID_INDEX"] == _live_index(host, ipv4)
    assert env["VLLM_HOST_IP"] == ipv4
    assert env["NCCL_IB_HCA"] == "=rocep1s0f1,roceP2p1s0f1"
    assert env["NCCL_SOCKET_IFNAME"] == "=enp1s0f1np1"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp1s0f1np1"


def test_serving_standin_resolved_at_boot(host):
    unit = host.service("dgxspark-serving-standin")
    assert unit.is_enabled and unit.is_running
    log = host.check_output("journalctl -b -u dgxspark-serving-standin --no-pager")
    assert re.search(r"index \d+", log), log


def test_rails_are_healthy_again(host):
    """A loopback ib_write_bw on the rail moves a healthy figure again (no ~13 Gb/s)."""
    ipv4 = HOSTS[host.backend.get_hostname()]["dgxspark_fabric_rails"][0]["ipv4"]
    index = _live_index(host, ipv4)
    out = host.check_output(
        "ib_write_bw -d rocep1s0f1 -x %s --report_gbits -D 1 >/dev/null 2>&1 & sleep 0.5; "
        "ib_write_bw -d rocep1s0f1 -x %s --report_gbits -D 1 %s" % (index, index, ipv4))
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*65536\s", line)]
    assert len(rows) == 1, out
    assert float(rows[0][3]) >= 80.0, out
