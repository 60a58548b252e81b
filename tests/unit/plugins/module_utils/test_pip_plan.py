# -*- coding: utf-8 -*-
"""plugins/module_utils/pip_plan.py: the hash lock's parser and every argv of the runtime venv's torch and vLLM install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.dgxspark.cluster.plugins.module_utils import pip_plan  # noqa: E402

H1, H2 = "a" * 64, "b" * 64
VENV = "/opt/dgxspark/vllm"
PIP = VENV + "/bin/pip"
CU130 = "https://download.pytorch.org/whl/cu130"
CONSTRAINTS = VENV + "/.dgxspark-torch-constraints.txt"


def _report(requires, name="vllm", version="0.11.0"):
    """pip install --dry-run --no-deps --ignore-installed --quiet --report - as pip 24 prints it (trimmed)."""
    return json.dumps({"version": "1", "pip_version": "24.0", "install": [{
        "download_info": {"url": "https://files.pythonhosted.org/packages/.../vllm-0.11.0-cp38-abi3-manylinux_2_31_aarch64.whl",
                          "archive_info": {"hashes": {"sha256": H1}}},
        "is_direct": False, "is_yanked": False, "requested": True,
        "metadata": {"metadata_version": "2.4", "name": name, "version": version, "requires_dist": requires}}],
        "environment": {"platform_machine": "aarch64", "python_version": "3.12"}})


# ---- lock_pins

def test_lock_pins_reads_continuations_and_comments():
    text = ("# header\nhuggingface_hub==2.4.0 \\\n    --hash=sha256:%s \\\n    --hash=sha256:%s\n\n"
            "PyYAML==6.0.4 --hash=sha256:%s  # inline\n" % (H1, H2, H2))
    assert pip_plan.lock_pins(text) == {"huggingface-hub": "2.4.0", "pyyaml": "6.0.4"}


@pytest.mark.parametrize("text", [
    "huggingface_hub==2.4.0\n",                                     # no hash
    "huggingface_hub>=2.4.0 --hash=sha256:%s\n" % H1,               # not a pin
    "huggingface_hub==2.4.0 --hash=md5:%s\n" % ("a" * 32),          # not sha256
    "huggingface_hub==2.4.0 --hash=sha256:%s --index-url https://x\n" % H1,   # another option
    "--extra-index-url https://evil.example/simple\n",              # an option line
    "x==1 --hash=sha256:%s\nX==2 --hash=sha256:%s\n" % (H1, H2),    # a name twice
    "# nothing\n",
], ids=["no-hash", "not-a-pin", "md5", "option-after", "option-line", "twice", "empty"])
def test_lock_pins_refuses_anything_but_hashed_pins(text):
    with pytest.raises(pip_plan.PipPlanError):
        pip_plan.lock_pins(text)


# ---- torch_requirements

def test_torch_requirements_are_vllms_own_with_markers_kept_and_extras_left_out():
    report = _report(["regex", "torch==2.9.0", "torchaudio==2.9.0", "torchvision==0.24.0",
                      "xformers==0.0.32.post1; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
                      "torch-c-dlpack-ext; extra == \"bench\"", "torchvision; extra == 'video'",
                      "torch (==2.9.0) ; platform_machine == 'aarch64'"])
    assert pip_plan.torch_requirements(report) == [
        "torch==2.9.0", "torchaudio==2.9.0", "torchvision==0.24.0", "torch (==2.9.0) ; platform_machine == 'aarch64'"]


@pytest.mark.parametrize("report, message", [
    (_report(["torch @ https://evil.example/torch-2.9.0-cp312-cp312-linux_aarch64.whl"]), "direct reference"),
    (_report(["torchvision==0.24.0", "numpy"]), "names no torch requirement"),
    (json.dumps({"version": "1", "install": []}), "exactly the vLLM"),
    ("Collecting vllm", "not JSON"),
], ids=["direct-reference", "no-torch", "empty-report", "not-json"])
def test_torch_requirements_refuses(report, message):
    with pytest.raises(pip_plan.PipPlanError, match=message):
        pip_plan.torch_requirements(report)


# ---- vllm_install_plan

def test_plan_without_torch_spec_before_and_after_the_probe():
    args = ["--cert", "/etc/ssl/corp.pem", "--extra-index-url", "https://mirror.example/simple", "--index-url=https://x/simple",
            "--no-index", "-f", "/srv/wheels", "--timeout", "60"]
    before = pip_plan.vllm_install_plan(VENV, "vllm==0.11.0", args, torch_index_url=CU130, constraints=CONSTRAINTS)
    assert before["probe"] == [PIP, "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet", "--report", "-"] + args + ["vllm==0.11.0"]
    assert before["torch"] == []    # not known until the probe ran (and never in check mode)
    after = pip_plan.vllm_install_plan(VENV, "vllm==0.11.0", args, torch_index_url=CU130, constraints=CONSTRAINTS,
                                       report=_report(["torch==2.9.0", "torchvision==0.24.0"]))
    # the torch index alone: the vLLM's index options are not passed, pip's configured ones emptied
    assert after["torch"] == [PIP, "install", "--index-url", CU130, "--cert", "/etc/ssl/corp.pem", "--timeout", "60",
                              "torch==2.9.0", "torchvision==0.24.0"]
    assert after["torch_env"] == {"PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""}
    assert after["vllm"] == [PIP, "install"] + args + ["--constraint", CONSTRAINTS, "vllm==0.11.0"]
    assert "--extra-index-url" not in after["vllm"][:2] and CU130 not in after["vllm"]
    assert after["installed"][:2] == [VENV + "/bin/python", "-c"] and after["installed"][3:] == ["torch", "torchvision", "torchaudio"]
    assert after["reinstall"] == []


def test_plan_with_a_torch_spec_needs_no_probe():
    plan = pip_plan.vllm_install_plan(VENV, "git+https://github.com/example/vllm.git@port-0271", [], torch_index_url=CU130,
                                      torch_spec="torch==2.11.0", constraints=CONSTRAINTS)
    assert plan["probe"] == []
    assert plan["torch"] == [PIP, "install", "--index-url", CU130, "torch==2.11.0"]
    assert plan["vllm"] == [PIP, "install", "--constraint", CONSTRAINTS, "git+https://github.com/example/vllm.git@port-0271"]


def test_plan_of_a_local_wheel_and_of_no_torch():
    wheel = VENV + "-dist/vllm-0.27.1+spark.sim-py3-none-any.whl"
    plan = pip_plan.vllm_install_plan(VENV, wheel, ["--no-index"], torch_install=False, torch_index_url=CU130,
                                      torch_spec="torch==2.11.0")
    assert plan == {"probe": [], "torch": [], "torch_env": {}, "installed": [],
                    "vllm": [PIP, "install", "--no-index", wheel],
                    "reinstall": [PIP, "install", "--force-reinstall", "--no-deps", "--no-index", wheel]}


def test_plan_needs_a_torch_index():
    with pytest.raises(pip_plan.PipPlanError, match="runtime_torch_index_url"):
        pip_plan.vllm_install_plan(VENV, "vllm==0.11.0", [], torch_index_url="")


# ---- torch_constraints

def test_constraints_pin_the_local_version_label():
    installed = json.dumps({"torch": "2.9.0+cu130", "torchaudio": None, "torchvision": "0.24.0+cu130"})
    assert pip_plan.torch_constraints(installed) == "torch==2.9.0+cu130\ntorchvision==0.24.0+cu130\n"


@pytest.mark.parametrize("installed", [
    {"torch": None}, {}, {"torch": "2.9.0\n--index-url https://evil.example"}, {"torch": "2.9.0 ; os_name"}, "[]",
], ids=["no-torch", "empty", "newline", "marker", "not-a-dict"])
def test_constraints_refuse(installed):
    with pytest.raises(pip_plan.PipPlanError):
        pip_plan.torch_constraints(installed)
