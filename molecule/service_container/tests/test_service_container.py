"""Live state of the service_container scenario's pair after converge, idempotence
and the side-effect cases (power loss -> exit 3, exit-0 rank restarted by
docker, image mismatch, knob change and back).

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


def test_unit_is_an_active_oneshot_retrying_only_a_failed_start(host):
    assert host.run("systemctl is-active dgxspark-vllm.service").stdout.strip() == "active"
    assert host.run("systemctl is-enabled dgxspark-vllm.service").stdout.strip() == "enabled"
    lines = host.file(UNIT).content_string.splitlines()
    for line in ("Type=oneshot", "RemainAfterExit=yes", "SuccessExitStatus=3", "ExecStart=/usr/local/sbin/dgxspark-vllm-start",
                 "ExecStop=/usr/local/sbin/dgxspark-vllm-stop", "ExecStartPre=+/usr/local/sbin/dgxspark-nccl-env",
                 "LimitMEMLOCK=infinity"):
        assert line in lines
    # systemd retries a failed start only (bounded by the start limit); docker restarts a crashed rank.
    assert [line for line in lines if line.startswith("Restart=")] == ["Restart=on-failure"]
    assert [line for line in lines if line.startswith("StartLimitBurst=")]
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
    # Not in the container's config either (issue 24 finding 10: it was an env_file entry, so Config.Env held it):
    # the secret file is mounted read-only and the rank's start-up exports it to the exec'd vllm only.
    inspect = host.check_output("docker container inspect dgxspark-vllm")
    assert API_KEY not in inspect
    assert not [e for e in _container(host)["Config"]["Env"] if e.startswith("VLLM_API_KEY=")]
    mounts = {m["Destination"]: m for m in _container(host)["Mounts"]}
    assert mounts["/etc/dgxspark/vllm-secret.env"]["RW"] is False
    if expected["group"] == "spark_head":
        # vLLM still has the key: a request without it is refused, one with it answers.
        probe = ("python3 -c 'import sys, urllib.request, urllib.error\n"
                 "req = urllib.request.Request(\"http://127.0.0.1:8888/v1/models\")\n"
                 "key = [l.split(\"=\", 1)[1] for l in open(sys.argv[1]).read().split() if l.startswith(\"VLLM_API_KEY=\")]\n"
                 "key and req.add_header(\"Authorization\", \"Bearer \" + key[0])\n"
                 "try:\n    print(urllib.request.urlopen(req, timeout=30).status)\n"
                 "except urllib.error.HTTPError as exc:\n    print(exc.code)' %s")
        assert host.check_output(probe % "/dev/null").strip() == "401"
        # The key read from the head's secret file (never in an argv).
        assert host.check_output(probe % "/etc/dgxspark/vllm-secret.env").strip() == "200"


def test_head_serves(host, expected):
    if expected["group"] != "spark_head":
        # the worker's rank is headless (--headless): nothing of it answers on the API port
        listening = host.check_output("ss -Hltn 'sport = :8888'")
        assert listening.strip() == "", "the worker listens on the API port: %s" % listening
        return
    check = host.run("python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888 "
                     "--served-model-name deepseek-v4-flash-0731 --max-model-len 1048576 "
                     "--secret-env-file /etc/dgxspark/vllm-secret.env")
    assert check.rc == 0, check.stdout


# The recipe's start-up at the pinned commit (docker-compose.dspark.yml @ 489af95, mirrored by the stand-in
# checkout): its steps with the default switches, in its order, before vllm serve.
RECIPE_STEPS_HEAD = [
    "encoder-install", "hotfix-encoding-dsv4-issue21.py", "hotfix-dsv4-issue55-tool-truncation.py",
    "hotfix-nvfp4-ds-mla-issue22.sh", "hotfix-gb10-spin-wait.sh",
    "hotfix-dsv4-mtp-buffer-50312.sh", "hotfix-dsv4-adaptive-topk-50004.sh", "hotfix-dsv4-skip-topk-49486.sh",
    "hotfix-dsv4-dense-prefill-indexer-48407.sh", "hotfix-dsv4-skip-empty-c128-48957.sh",
    "hotfix-dsv4-flashmla-workspace-50298.sh", "hotfix-dsv4-grammar-advance.sh",
    "hotfix-vllm-redact-api-key-log.sh", "hotfix-vllm-redact-api-key-log.sh --status",
    "hotfix-vllm-empty-encoder-output.py", "hotfix-dsv4-issue27-partial-prefill-concurrency.py",
    "hotfix-dsv4-issue43-decode-fairness-and-diag.py", "hotfix-dsv4-issue26-hybrid-swa-min.py",
    "hotfix-dsv4-suppress-stops-in-reasoning.py", "vllm-serve",
]


def _startup_record(host):
    text = host.check_output("docker exec dgxspark-vllm python3 -c "
                             "\"print(open('/var/tmp/dgxspark-standin-startup.log').read())\"")
    steps = [line.split(" ", 1)[1] for line in text.splitlines() if line.strip()]
    # A rank docker restarted in place (case 2) ran the start-up again in the same container: the last run.
    runs = " | ".join(steps).split("vllm-serve")
    assert steps and steps[-1] == "vllm-serve", steps
    return [s for s in runs[-2].strip(" |").split(" | ") if s] + ["vllm-serve"]


def test_recipe_startup_steps_ran_in_the_recipe_order_before_serving(host, expected):
    steps = _startup_record(host)
    names = [s.split(" ")[0] if s.startswith("encoder-install") else s for s in steps]
    want = list(RECIPE_STEPS_HEAD)
    if expected["group"] == "spark_workers":
        # The API key (and so the recipe's key-redaction step) is on the head only.
        want = [s for s in want if not s.startswith("hotfix-vllm-redact-api-key-log.sh")]
    assert names == want
    snapshot = "/cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/%s/encoding/encoding_dsv4.py"
    assert steps[0] == "encoder-install " + snapshot % "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"


def test_rank_runs_the_pinned_recipe_checkout(host):
    info = _container(host)
    commit = open(os.path.join(os.environ.get("SPARK_SIM_DIR", os.path.join(os.path.dirname(os.path.dirname(SCENARIO)),
                                                                            ".sim", "molecule-service_container")),
                               "dspark-recipe-standin.commit"), encoding="utf-8").read().strip()
    assert re.match(r"^[0-9a-f]{40}$", commit)
    assert host.file("/opt/dgxspark/dspark-recipe/.dgxspark-recipe-commit").content_string.strip() == commit
    assert info["Config"]["Labels"]["io.dgxspark.recipe-commit"] == commit
    # bash -c <the secret reader> dgxspark-secret /etc/dgxspark/vllm-secret.env
    # bash -lc <the recipe's start-up> dgxspark-dspark-startup /usr/local/bin/vllm serve MODEL ...
    assert info["Path"] == "bash" and info["Args"][0] == "-c"
    assert info["Args"][2:6] == ["dgxspark-secret", "/etc/dgxspark/vllm-secret.env", "bash", "-lc"]
    assert info["Args"][7:10] == ["dgxspark-dspark-startup", "/usr/local/bin/vllm", "serve"]
    assert info["Args"][1].rstrip().endswith('exec "$@"') and info["Args"][6].rstrip().endswith('exec "$@"')
    mounts = {m["Destination"]: m["Source"] for m in info["Mounts"]}
    assert mounts["/opt/dspark-patches"] == "/opt/dgxspark/dspark-recipe/patches"
    assert mounts["/opt/hotfix-dsv4-issue55-tool-truncation.py"] == \
        "/opt/dgxspark/dspark-recipe/patches/hotfix-dsv4-issue55-tool-truncation.py"
    env = info["Config"]["Env"]
    for switch in ("DSPARK_SKIP_HOTFIX=0", "DSPARK_SKIP_ISSUE22_HOTFIX=0", "DSPARK_SKIP_SPIN_WAIT_HOTFIX=0",
                   "DSPARK_SUPPRESS_STOPS_IN_REASONING=1", "DSPARK_MAX_INFLIGHT_PREFILLS=2",
                   "DSPARK_REVISION=9e165c30e2704aec5d9d593cce3eebd58bbef1cb",
                   "TORCH_CUDA_ARCH_LIST=12.1a", "CUTE_DSL_ARCH=sm_121a", "VLLM_USE_B12X_MOE=1"):
        assert switch in env


def test_every_node_runs_the_same_image_id(host):
    """The image id compared across the nodes (the head's against the worker's), not only each node's own label."""
    import testinfra  # pylint: disable=import-outside-toplevel

    ssh_config = os.path.join(os.path.dirname(os.path.dirname(SCENARIO)), ".sim", "molecule-service_container", "ssh_config")
    ids = {}
    for name in sorted(HOSTS):
        other = testinfra.get_host("ssh://" + name, ssh_config=ssh_config, sudo=True)
        ids[name] = (other.check_output("docker container inspect --format '{{.Image}}' dgxspark-vllm"),
                     other.check_output("docker image inspect --format '{{.Id}}' %s" % IMAGE))
    assert len(set(ids.values())) == 1, ids
    assert ids[sorted(HOSTS)[0]][0].startswith("sha256:")


TRANSFER_UNIT = "dgxspark-image-transfer.service"
# The transfer token's shape (roles/runtime/tasks/transfer.yml): a fixed prefix and 40 letters/digits. This
# pattern, as text, does not match itself, so the sudo/ssh records of this very check cannot trip it.
TOKEN_RE = "dgxspark_xfer_[A-Za-z0-9]{20}"


def _transfer_defaults():
    with open(os.path.join(os.path.dirname(os.path.dirname(SCENARIO)), "roles", "runtime", "defaults", "main.yml"),
              encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    return (VARS.get("runtime_container_transfer_port", defaults["runtime_container_transfer_port"]),
            VARS.get("runtime_container_transfer_dir", defaults["runtime_container_transfer_dir"]))


def test_image_transfer_server_is_gone_after_the_transfer(host, expected):
    port, directory = _transfer_defaults()
    state = host.check_output("systemctl show --property=LoadState,ActiveState %s", TRANSFER_UNIT)
    assert "ActiveState=active" not in state and "ActiveState=activating" not in state, state
    listening = host.run("ss -Hltn 'sport = :%d'" % port)
    assert listening.rc == 0 and listening.stdout.strip() == "", listening
    assert "dgxspark_image_transfer" not in host.check_output("ps -eo args")
    assert not host.file(directory + "/curl.conf").exists  # the worker's copy of the token
    if expected["group"] != "spark_head":
        return  # the server runs on the head only: on a worker, the checks above hold as well
    assert not host.file(directory + "/token").exists
    assert host.check_output("find %s -name 'image-*.tar'", directory) == ""
    # It left by itself (every worker read the whole file), once per transfer (converge, case 3), not stopped.
    journal = host.check_output("journalctl --no-pager -o cat -u %s", TRANSFER_UNIT)
    assert journal.count("every peer fetched the whole file; exiting") >= 2, journal[-2000:]
    for worker in (h for h, v in HOSTS.items() if v["group"] == "spark_workers"):
        ipv4 = HOSTS[worker]["dgxspark_fabric_rails"][0]["ipv4"]
        assert "%s: complete (" % ipv4 in journal, journal[-2000:]


def test_image_transfer_server_ran_as_a_dynamic_user_not_root(host, expected):
    """Issue 24 finding 10: the server ran as root (systemd-run with NoNewPrivileges only). Now each transfer's server
    runs as its unit's dynamic user: the uid journald recorded for its "serving" line (_UID, not what the server
    says) is not 0 and is the uid the server logged, and the tar and the token came as descriptors."""
    if expected["group"] != "spark_head":
        return
    entries = [json.loads(line) for line in
               host.check_output("journalctl --no-pager -o json -u %s", TRANSFER_UNIT).splitlines() if line.strip()]
    serving = [(e.get("_UID"), e.get("MESSAGE")) for e in entries
               if isinstance(e.get("MESSAGE"), str) and "dgxspark-image-transfer: serving /" in e["MESSAGE"]]
    assert len(serving) >= 2, serving  # converge and case 3
    for uid, message in serving:
        assert uid is not None and uid != "0", (uid, message)
        assert " as uid %s gid " % uid in message, (uid, message)


def test_transfer_token_never_in_the_journal(host):
    found = host.run("journalctl --no-pager -o cat | grep -cE '%s'" % TOKEN_RE)
    assert found.stdout.strip() == "0", "the transfer token appears in %s's journal" % host.backend.get_hostname()


def test_rank_keeps_this_nodes_caches_and_the_recipes_limits(host):
    """The env file names the node's cache paths (no TMPDIR: /tmp itself is bound), the rank mounts the cache at the same
    path and its tmp subdirectory on /tmp, and runs with the recipe's ulimits.stack (67108864)."""
    cache = VARS.get("runtime_cache_dir", "/var/lib/dgxspark/vllm-cache")
    env = dict(line.split("=", 1) for line in host.file("/etc/dgxspark/vllm.env").content_string.splitlines()
               if line and not line.startswith("#"))
    want = {"VLLM_CACHE_ROOT": "vllm", "FLASHINFER_WORKSPACE_BASE": "flashinfer", "TILELANG_CACHE_DIR": "tilelang",
            "TRITON_CACHE_DIR": "triton"}
    assert {key: env.get(key) for key in want} == {key: "%s/%s" % (cache, sub) for key, sub in want.items()}
    assert "TMPDIR" not in env
    container = _container(host)
    mounts = {m["Destination"]: m["Source"] for m in container["Mounts"]}
    assert mounts[cache] == cache and mounts["/tmp"] == cache + "/tmp"
    assert {"Name": "stack", "Soft": 67108864, "Hard": 67108864} in container["HostConfig"]["Ulimits"]
    for sub in list(want.values()) + ["tmp"]:
        directory = host.file("%s/%s" % (cache, sub))
        assert directory.is_directory and directory.user == "vllm" and directory.mode == 0o750
