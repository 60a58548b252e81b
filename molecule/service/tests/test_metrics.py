"""node exporter and the collection's dgxspark_* metrics on the service scenario's pair (the converge's metrics play).

From the controller, through each node's management address (where a Prometheus server would scrape): the page
refuses a request without its credentials (and with a wrong password), and with them it has every dgxspark_* metric
whose writer runs in this scenario, with the values the node itself shows: the clock cap (the inventory's ceiling,
the SM clock nvidia-smi reads back), each rail's NCCL GID index (the sim's seed index, the resolver's env file), the
serving state, MemAvailable, the fabric Gb/s per rail and direction, and on the head the watchdog's counters.
The checkpoint role does not run in this scenario: dgxspark_checkpoint_verified_info is the unit tests' (and the
default scenario's) to show. Expected values come from the inventory, not from constants.
"""

import base64
import os
import re
import sys
import urllib.error
import urllib.request

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.dirname(os.path.dirname(SCENARIO))
sys.path.insert(0, os.path.join(PROJECT, "plugins", "module_utils"))
import textfile_metrics  # noqa: E402 pylint: disable=wrong-import-position


def _yaml(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


INV = _yaml(SCENARIO, "inventory", "hosts.yml")["all"]["children"]["spark"]["children"]
HOSTS = dict(list(INV["spark_head"]["hosts"].items()) + list(INV["spark_workers"]["hosts"].items()))
HEAD = next(iter(INV["spark_head"]["hosts"]))
VARS = _yaml(SCENARIO, "inventory", "group_vars", "spark", "metrics.yml")
PASSWORD = VARS["metrics_exporter_basic_auth_password"]
PORT = _yaml(PROJECT, "roles", "metrics", "defaults", "main.yml")["metrics_exporter_port"]
USER = _yaml(PROJECT, "roles", "metrics", "defaults", "main.yml")["metrics_exporter_basic_auth_user"]
CLOCK_MAX = _yaml(PROJECT, "roles", "clock_cap", "defaults", "main.yml")["clock_cap_max_mhz"]
NOT_HERE = {"dgxspark_checkpoint_verified_info"}        # the checkpoint role is not in this scenario's converge
HEAD_ONLY = {name for name in textfile_metrics.CATALOGUE if name.startswith("dgxspark_watchdog_")}


def fetch(name, password=PASSWORD):
    """(status, body) of GET /metrics at the node's management address, from the controller (no proxy)."""
    req = urllib.request.Request("http://%s:%d/metrics" % (HOSTS[name]["ansible_host"], PORT))
    if password is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(("%s:%s" % (USER, password)).encode()).decode())
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


@pytest.fixture()
def name(host):
    return host.backend.get_hostname()


@pytest.fixture()
def page(host, name):
    if name == HEAD:                       # one watchdog tick (its timer is off on the sim until test_watchdog.py)
        host.run("systemctl start dgxspark-vllm-watchdog.service")
    status, body = fetch(name)
    assert status == 200, status
    return textfile_metrics.read(body)


def samples(page, metric):
    return [(labels, value) for key, labels, value in page if key == metric]


def test_the_exporter_refuses_a_request_without_its_credentials(name):
    assert fetch(name, password=None)[0] == 401
    assert fetch(name, password=PASSWORD + "x")[0] == 401


def test_the_password_is_on_the_node_only_as_its_bcrypt_hash(host):
    web = host.file("/etc/dgxspark/node-exporter-web.yml")
    assert (web.user, web.group, web.mode) == ("root", host.check_output("id -gn prometheus"), 0o640)
    assert host.check_output("systemctl show -p User --value prometheus-node-exporter") == "prometheus"
    assert re.search(r'^  %s: "\$2b\$10\$[./A-Za-z0-9]{53}"$' % USER, web.content_string, re.M)
    assert PASSWORD not in web.content_string
    assert PASSWORD not in host.check_output("cat /proc/$(systemctl show -p MainPID --value prometheus-node-exporter)/cmdline "
                                             "| tr '\\0' ' '")
    assert PASSWORD not in host.check_output("journalctl --no-pager -o cat | tail -n 5000")
    textfiles = host.file("/var/lib/dgxspark/metrics")
    assert (textfiles.user, textfiles.group, textfiles.mode) == ("root", "root", 0o755)


def test_every_dgxspark_metric_is_on_the_page(name, page):
    found = {key for key, _labels, _value in page if key.startswith("dgxspark_")}
    expected = set(textfile_metrics.CATALOGUE) - NOT_HERE - (set() if name == HEAD else HEAD_ONLY)
    assert found == expected, (sorted(expected - found), sorted(found - expected))
    assert samples(page, "node_textfile_scrape_error") == [({}, 0.0)]


def test_the_clock_cap_values(host, page):
    assert samples(page, "dgxspark_clock_cap_applied") == [({}, 1.0)]
    assert samples(page, "dgxspark_clock_cap_max_mhz") == [({}, float(CLOCK_MAX))]
    read_back = int(host.check_output("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits").split(",")[0])
    assert samples(page, "dgxspark_sm_clock_mhz") == [({}, float(read_back))]
    assert read_back <= CLOCK_MAX


def test_each_rails_gid_index(host, name, page):
    env = dict(line.split("=", 1) for line in host.check_output("cat /run/dgxspark/nccl.env").splitlines()
               if "=" in line and not line.startswith("#"))
    rails = samples(page, "dgxspark_nccl_gid_index")
    assert sorted(labels["ipv4"] for labels, _value in rails) == sorted(r["ipv4"] for r in HOSTS[name]["dgxspark_fabric_rails"])
    for labels, value in rails:
        assert value == HOSTS[name]["spark_sim_gid_index_v2"] == int(env["NCCL_IB_GID_INDEX"]), (labels, value, env)
        assert labels["selected_by"] == "resolver"
    assert samples(page, "dgxspark_nccl_gid_resolved") == [({}, 1.0)]


def test_serving_state_memory_and_fabric(host, name, page):
    states = {labels["state"]: value for labels, value in samples(page, "dgxspark_serving_state")}
    assert states["active"] == 1.0 and sum(states.values()) == 1.0, states
    mem = samples(page, "dgxspark_memavailable_bytes")[0][1]
    now = int(host.check_output("awk '/^MemAvailable:/ {print $2 * 1024}' /proc/meminfo"))
    assert abs(mem - now) <= 0.2 * now, (mem, now)
    links = samples(page, "dgxspark_fabric_gbps")
    rails = len(HOSTS[name]["dgxspark_fabric_rails"])
    assert sorted((labels["rail"], labels["direction"]) for labels, _value in links) == sorted(
        (str(rail), direction) for rail in range(rails) for direction in ("send", "receive")), links
    assert all(value > 0 for _labels, value in links), links


def test_the_watchdog_counters_on_the_head(name, page):
    if name != HEAD:
        assert not any(key.startswith("dgxspark_watchdog_") for key, _labels, _value in page)
        return
    for metric in ("dgxspark_watchdog_stalls_total", "dgxspark_watchdog_restarts_total", "dgxspark_watchdog_not_restarted_total"):
        assert samples(page, metric) == [({}, 0.0)], metric
    assert samples(page, "dgxspark_watchdog_last_tick_timestamp_seconds")[0][1] > 0
