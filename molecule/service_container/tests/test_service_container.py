"""Live state of the service_container scenario's pair after converge, idempotence
and the side-effect cases (power loss -> exit 3, exit-0 rank restarted by
docker, image mismatch, knob change and back).

Expected values come from this scenario's inventory, not from constants.

Molecule's `check` step is not in this scenario's test sequence (it asserts nothing): check mode
is asserted once, site-wide, in the default scenario's verify (test_check_mode.py).
"""

import json
import os
import re

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = "/etc/systemd/system/dgxspark-vllm.service"
COMPOSE = "/opt/dgxspark/vllm-compose/compose.yaml"


def _inventory():
    with open(os.path.join(SCENARIO, "inventory", "hosts.yml"), encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    hosts = {}
    for group in ("spark_head", "spark_workers"):
        for name, hvars in inv["all"]["children"]["spark"]["children"][group]["hosts"].items():
            hosts[name] = dict(hvars, group=group)
    with open(os.path.join(SCENARIO, "inventory", "group_vars", "spark", "service.yml"), encoding="utf-8") as handle:
        scenario_vars = yaml.safe_load(handle)
    return hosts, scenario_vars


HOSTS, VARS = _inventory()
API_KEY = VARS["runtime_vllm_api_key"]
IMAGE = VARS["runtime_container_image"]


@pytest.fixture()
def expected(host):
    return HOSTS[host.backend.get_hostname()]


def _container(host):
    return json.loads(host.check_output("docker container inspect dgxspark-vllm"))[0]


def test_unit_is_an_active_oneshot_without_a_systemd_restart_loop(host):
    assert host.run("systemctl is-active dgxspark-vllm.service").stdout.strip() == "active"
    assert host.run("systemctl is-enabled dgxspark-vllm.service").stdout.strip() == "enabled"
    lines = host.file(UNIT).content_string.splitlines()
    for line in ("Type=oneshot", "RemainAfterExit=yes", "SuccessExitStatus=3", "ExecStart=/usr/local/sbin/dgxspark-vllm-start",
                 "ExecStop=/usr/local/sbin/dgxspark-vllm-stop", "ExecStartPre=+/usr/local/sbin/dgxspark-nccl-env",
                 "LimitMEMLOCK=infinity"):
        assert line in lines
    assert not [line for line in lines if line.startswith("Restart=")]
    assert any(re.match(r"After=.*dgxspark-clock-cap\.service.*docker\.service", line) for line in lines)


def test_start_script_says_already_running(host):
    run = host.run("/usr/local/sbin/dgxspark-vllm-start")
    assert run.rc == 3, run.stdout + run.stderr
    assert "already running with this configuration" in run.stdout


def test_rank_runs_with_host_network_ipc_and_restart_policy(host, expected):
    info = _container(host)
    assert info["State"]["Running"] is True
    hcfg = info["HostConfig"]
    assert hcfg["NetworkMode"] == "host"
    assert hcfg["IpcMode"] == "host"
    assert hcfg["RestartPolicy"]["Name"] == "unless-stopped"
    assert hcfg["ShmSize"] == 256 * 1024 * 1024
    mounts = [(m["Source"], m["Destination"]) for m in info["Mounts"]]
    assert ("/var/lib/dgxspark/huggingface/hub", "/var/lib/dgxspark/huggingface/hub") in mounts
    args = info["Args"]
    assert args[args.index("--master-addr") + 1] == "192.168.170.1"
    assert ("--headless" in args) is (expected["group"] == "spark_workers")
    env = info["Config"]["Env"]
    assert "NCCL_IB_GID_INDEX=%d" % expected["spark_sim_gid_index_v2"] in env


def test_compose_file_names_the_image_and_its_id(host):
    compose = yaml.safe_load(host.file(COMPOSE).content_string)
    svc = compose["services"]["vllm"]
    assert svc["image"] == IMAGE
    assert svc["network_mode"] == "host" and svc["ipc"] == "host"
    assert svc["labels"]["io.dgxspark.image-id"].startswith("sha256:")


def test_rank_runs_the_image_the_role_checked(host):
    # The role asserts the id is equal on every node; here each node runs the id in its compose label.
    info = _container(host)
    label = yaml.safe_load(host.file(COMPOSE).content_string)["services"]["vllm"]["labels"]["io.dgxspark.image-id"]
    assert info["Image"] == label
    assert host.check_output("docker image inspect --format '{{.Id}}' %s" % IMAGE) == label


def test_api_key_not_in_argv_or_unit(host, expected):
    secret = host.file("/etc/dgxspark/vllm-secret.env")
    assert secret.mode == 0o640 and secret.user == "root" and secret.group == "vllm"
    assert (("VLLM_API_KEY=%s" % API_KEY) in secret.content_string.splitlines()) is (expected["group"] == "spark_head")
    assert API_KEY not in host.check_output("ps -eo args")
    assert API_KEY not in " ".join(_container(host)["Args"])
    assert API_KEY not in host.file(UNIT).content_string
    assert API_KEY not in host.file(COMPOSE).content_string


def test_head_serves(host, expected):
    if expected["group"] != "spark_head":
        pytest.skip("the API runs on the head")
    check = host.run("python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888 "
                     "--served-model-name deepseek-v4-flash-0731 --max-model-len 1048576 "
                     "--secret-env-file /etc/dgxspark/vllm-secret.env")
    assert check.rc == 0, check.stdout
