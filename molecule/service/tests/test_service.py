"""Live state of the service scenario's pair after converge, idempotence
and the side-effect cases (exit-0 restart, knob change, head-only change, start
limit and recovery).

Expected values come from this scenario's inventory, not from constants.

Molecule's `check` step is not in this scenario's test sequence (it asserts nothing): check mode
is asserted once, site-wide, in the default scenario's verify (test_doctor.py, after doctor ran).
"""

import json
import os
import re

import pytest
import yaml

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = "/etc/systemd/system/dgxspark-vllm.service"


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


@pytest.fixture()
def expected(host):
    return HOSTS[host.backend.get_hostname()]


def _main_pid(host):
    return int(host.check_output("systemctl show -p MainPID --value dgxspark-vllm.service"))


def test_unit_is_active_and_enabled(host):
    assert host.run("systemctl is-active dgxspark-vllm.service").stdout.strip() == "active"
    assert host.run("systemctl is-enabled dgxspark-vllm.service").stdout.strip() == "enabled"


def test_unit_restart_semantics(host):
    unit = host.file(UNIT).content_string
    unit_section = unit.split("[Service]")[0]
    assert re.search(r"^StartLimitIntervalSec=\d+$", unit_section, re.M)
    assert re.search(r"^StartLimitBurst=\d+$", unit_section, re.M)
    assert re.search(r"^After=.*network-online\.target", unit_section, re.M)
    assert re.search(r"^After=.*dgxspark-clock-cap\.service", unit_section, re.M)
    service = unit.split("[Service]")[1]
    assert "Restart=always" in service.splitlines()
    assert "LimitMEMLOCK=infinity" in service.splitlines()
    assert re.search(r"^TimeoutStartSec=(\d+)$", service, re.M).group(1) == "1800"
    assert "ExecStartPre=+/usr/local/sbin/dgxspark-nccl-env" in service.splitlines()
    assert host.run("systemd-analyze verify %s" % UNIT).rc == 0


def test_rank_runs_as_the_service_user_with_its_rank(host, expected):
    pid = _main_pid(host)
    assert host.check_output("ps -o user= -p %d" % pid).strip() == "vllm"
    args = host.check_output("ps -o args= -p %d" % pid)
    assert "--master-addr 192.168.150.1" in args
    head = expected["group"] == "spark_head"
    assert ("--headless" in args) is (not head)
    assert "--node-rank %d" % (0 if head else 1) in args


def test_rank_argv_follows_the_venv_profile_of_seed_000(host):
    """Where seed 000's venv stack differs from the container's (seed 004): Marlin MXFP4 MoE, FULL_AND_PIECEWISE
    graphs, max_num_seqs 12 (capture 12 x 6 = 72), no FlashInfer autotune; the deepseek_v4 tokenizer mode as the
    recipe passes it (the 0731 repository ships no Jinja chat template), no VLLM_MXFP4_USE_MARLIN (gone upstream)."""
    argv = host.check_output("tr '\\0' '\\n' < /proc/%d/cmdline" % _main_pid(host)).splitlines()
    assert argv[argv.index("--moe-backend") + 1] == "marlin"
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert argv[argv.index("--max-num-seqs") + 1] == "12"
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == "72"
    assert argv[argv.index("--tokenizer-mode") + 1] == "deepseek_v4" and "flashinfer_b12x" not in argv
    assert "--enable-flashinfer-autotune" not in argv
    environ = host.check_output("tr '\\0' '\\n' < /proc/%d/environ" % _main_pid(host)).splitlines()
    assert "TORCH_CUDA_ARCH_LIST=12.1a" in environ
    assert not [e for e in environ if e.startswith("VLLM_MXFP4_USE_MARLIN=")]
    assert not [e for e in environ if e.startswith(("VLLM_USE_B12X_MOE=", "CUTE_DSL_ARCH=", "DSPARK_"))]


def test_rank_environment_has_this_boots_gid_index_and_cuda_13_3(host, expected):
    environ = host.check_output("tr '\\0' '\\n' < /proc/%d/environ" % _main_pid(host)).splitlines()
    assert "NCCL_IB_GID_INDEX=%d" % expected["spark_sim_gid_index_v2"] in environ
    assert "VLLM_HOST_IP=%s" % expected["dgxspark_fabric_rails"][0]["ipv4"] in environ
    assert "CUDA_HOME=/usr/local/cuda-13.3" in environ
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in environ
    # No checkpoint role in this scenario: offline stays off until every node is verified.
    assert "HF_HUB_OFFLINE=0" in environ


@pytest.mark.parametrize("path", ["/etc/dgxspark/vllm.env", "/etc/dgxspark/vllm-secret.env"])
def test_env_files_are_0640_root_service_group(host, path):
    env = host.file(path)
    assert env.mode == 0o640
    assert env.user == "root"
    assert env.group == "vllm"


def test_api_key_only_in_the_heads_secret_file(host, expected):
    secret = host.file("/etc/dgxspark/vllm-secret.env").content_string
    assert (("VLLM_API_KEY=%s" % API_KEY) in secret.splitlines()) is (expected["group"] == "spark_head")
    assert API_KEY not in host.check_output("ps -eo args")
    assert API_KEY not in host.file(UNIT).content_string
    assert API_KEY not in host.check_output("systemctl show dgxspark-vllm.service")
    assert API_KEY not in host.file("/etc/dgxspark/vllm.env").content_string


def test_no_restart_pending(host):
    assert not host.file("/var/lib/dgxspark/vllm.restart-pending").exists


def test_venv_holds_the_pinned_vllm(host):
    record = json.loads(host.file("/opt/dgxspark/vllm/.dgxspark-install.json").content_string)
    assert record["vllm"].startswith("/opt/dgxspark/vllm-dist/vllm-0.27.1")
    assert record["torch"] == ""
    assert host.check_output("/opt/dgxspark/vllm/bin/vllm --version").startswith("0.27.1")


def test_head_serves_the_model_with_the_key(host, expected):
    if expected["group"] != "spark_head":
        # the worker's rank is headless (--headless): nothing of it answers on the API port
        listening = host.check_output("ss -Hltn 'sport = :8888'")
        assert listening.strip() == "", "the worker listens on the API port: %s" % listening
        return
    url = "http://127.0.0.1:8888/v1/models"
    models = json.loads(host.check_output("curl -fsS -H 'Authorization: Bearer %s' %s" % (API_KEY, url)))
    entry = [m for m in models["data"] if m["id"] == "deepseek-v4-flash-0731"]
    assert entry and entry[0]["max_model_len"] == 1048576
    assert host.run("curl -s -o /dev/null -w '%%{http_code}' %s" % url).stdout.strip() == "401"
    check = host.run("python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888 "
                     "--served-model-name deepseek-v4-flash-0731 --max-model-len 1048576 "
                     "--secret-env-file /etc/dgxspark/vllm-secret.env")
    assert check.rc == 0, check.stdout
    # both 1-token requests answered through the role's check: the completion and the chat completion
    assert "a 1-token completion and a 1-token chat completion answered" in check.stdout, check.stdout


def test_env_file_names_this_nodes_own_cache_paths(host):
    """The venv kind: vllm.env names VLLM_CACHE_ROOT, FLASHINFER_WORKSPACE_BASE, TILELANG_CACHE_DIR, TRITON_CACHE_DIR and
    TMPDIR under runtime_cache_dir (this node's, owned by the service user), and the unit has the recipe's stack limit."""
    cache = VARS.get("runtime_cache_dir", "/var/lib/dgxspark/vllm-cache")
    env = dict(line.split("=", 1) for line in host.file("/etc/dgxspark/vllm.env").content_string.splitlines()
               if line and not line.startswith("#"))
    want = {"VLLM_CACHE_ROOT": "vllm", "FLASHINFER_WORKSPACE_BASE": "flashinfer", "TILELANG_CACHE_DIR": "tilelang",
            "TRITON_CACHE_DIR": "triton", "TMPDIR": "tmp"}
    assert {key: env.get(key) for key in want} == {key: "%s/%s" % (cache, sub) for key, sub in want.items()}
    for sub in want.values():
        directory = host.file("%s/%s" % (cache, sub))
        assert directory.is_directory and directory.user == "vllm" and directory.mode == 0o750
    assert "LimitSTACK=67108864" in host.file("/etc/systemd/system/dgxspark-vllm.service").content_string.splitlines()
    limits = host.check_output("cat /proc/%s/limits" % _main_pid(host))
    assert re.search(r"^Max stack size\s+67108864\s+67108864\s+bytes", limits, re.M), limits
