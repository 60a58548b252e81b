# -*- coding: utf-8 -*-
"""The container kind's API key reaches the exec'd vllm only, never the container's config (issue 24 finding 10).

roles/runtime/templates/compose.yaml.j2 is rendered by ansible-playbook with the role's real defaults and vars;
the test then checks that no env_file/environment entry names the secret file (docker inspect shows Config.Env),
that the file is bind-mounted read-only, and runs the rendered command's secret reader with bash against a
secret file and an argv that prints its environment and argv: VLLM_API_KEY is in the exec'd process's
environment, never in an argv. Before the fix the compose file listed the secret file under env_file (the first
assertion fails against it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

import roleplay

KEY = "sim-key-5f0a1c2e7b9d"


def render(tmp_path, recipe, offline=False):
    out = tmp_path / "compose.yaml"
    play_vars = {
        "__runtime_topology": {"role": "head", "node_rank": 0, "nnodes": 2, "hosts": ["h", "w"], "head": "h"},
        "__runtime_argv": ["deepseek-ai/DeepSeek-V4-Flash-0731", "--port", "8888"],
        "__runtime_hub_cache": "/srv/hub",
        "__runtime_cache_root": "/srv/cache",
        "runtime_kind": "container",
        "runtime_recipe_startup": recipe,
        "__runtime_recipe": {"script": 'echo recipe step; exec "$$@"', "mounts": []},
        "__runtime_image": {"Id": "sha256:" + "a" * 64},
        "runtime_vllm_api_key": KEY,
        "runtime_container_image": "spark-sim/vllm-standin:0.27.1",
        "runtime_recipe_version": "0" * 40,
        "__runtime_hf_hub_offline": offline,
    }
    template = os.path.join(roleplay.ROOT, "roles", "runtime", "templates", "compose.yaml.j2")
    # task vars: above the role's defaults, which the play loads as vars_files
    task = {"name": "Render the compose file", "ansible.builtin.template": {"src": template, "dest": str(out)},
            "vars": play_vars}
    proc = roleplay.run_role_play(tmp_path, "runtime", [task], {"ansible_python_interpreter": sys.executable})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return yaml.safe_load(out.read_text())["services"]["vllm"]


def compose_interpolated(value):
    """What docker compose makes of a string of the file: $$ is a literal $, and a single $ would be a variable
    (the test stubs none; it must not occur in what the role writes)."""
    assert re.search(r"\$[^$]", value.replace("$$", "")) is None and not value.replace("$$", "").endswith("$"), value
    return value.replace("$$", "$")


@pytest.mark.parametrize("recipe", [False, True], ids=["plain", "recipe"])
def test_the_key_is_read_by_the_rank_not_given_to_docker(tmp_path, recipe):
    service = render(tmp_path, recipe)
    secret_path = "/etc/dgxspark/vllm-secret.env"
    assert [e for e in service.get("env_file", []) if secret_path in json.dumps(e)] == []
    assert "environment" not in service
    assert "%s:%s:ro" % (secret_path, secret_path) in service["volumes"]
    argv = [compose_interpolated(arg) for arg in list(service["entrypoint"]) + list(service["command"])]
    assert argv.count(secret_path) == 1
    # Run the rendered command: the secret path points at a test file, the vllm argv at a printer.
    secret = tmp_path / "vllm-secret.env"
    secret.write_text("# roles/runtime\n  VLLM_API_KEY=%s  \n" % KEY)
    secret.chmod(0o640)
    at = argv.index(secret_path)
    printer = [sys.executable, "-c", "import json, os, sys; print(json.dumps([os.environ.get('VLLM_API_KEY'), sys.argv]))"]
    run = argv[:at] + [str(secret)] + printer
    if recipe:
        # The reader runs first, so the recipe's start-up sees the key (its key-log redaction step needs it).
        assert argv[:2] == ["bash", "-c"] and argv[3] == "dgxspark-secret" and argv[5:7] == ["bash", "-lc"]
        assert argv[8] == "dgxspark-dspark-startup"
        run = argv[:at] + [str(secret)] + argv[at + 1:at + 5] + printer
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    key, printed_argv = json.loads(result.stdout.strip().splitlines()[-1])
    assert key == KEY
    assert KEY not in json.dumps(printed_argv) and KEY not in json.dumps(run)
    # Quoted as an EnvironmentFile may quote it: the quotes go, as vllm_api.read_api_key drops them.
    secret.write_text('VLLM_API_KEY="%s"\n' % KEY)
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert json.loads(result.stdout.strip().splitlines()[-1])[0] == KEY
    # No file: the rank refuses to start (never a keyless head by accident).
    secret.unlink()
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 1 and "cannot read" in result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith("[")]  # vllm never ran


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "online"])
def test_the_hf_cache_is_read_only_once_verified(tmp_path, offline):
    """Every node verified the checkpoint (HF_HUB_OFFLINE=1): the rank gets the cache read-only (issue 24 finding 7: a
    container with the cache mounted writable could rewrite a file); before that it may still download into it."""
    service = render(tmp_path, False, offline)
    assert ("/srv/hub:/srv/hub:ro" if offline else "/srv/hub:/srv/hub") in service["volumes"], service["volumes"]
