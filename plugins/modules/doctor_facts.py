#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: doctor_facts
short_description: Read what doctor.yml judges on one node (driver, clock cap, packages, units, rendered files, checkpoint)
version_added: 0.1.0
description:
  - Reads, in one call, the node-local evidence of doctor.yml's gpu, platform, parity, checkpoint and serving checks;
    the verdicts are made on the controller (plugins/module_utils/doctor.py).
  - nvidia-smi's driver version, persistence mode and SM clocks (its output kept, for a "Driver/library version mismatch"),
    the loaded kernel module (C(<proc_root>/driver/nvidia/version)) against the installed userspace (dpkg-query, parsed
    by the driver role's parser), the running kernel's module build, the held packages and what C(apt-get --simulate
    upgrade) would move, earlyoom's and the serving unit's state and the first error of the unit's last start,
    the clock cap's status file, the NCCL environment the resolver wrote, the rendered vllm.env, the unit's command
    line, the CUDA release, the vLLM and torch versions (venv) or the image id (container), the checkpoint's verify
    record and unfinished files.
  - Read-only; runs and reports the same in check mode. Never reads the secret environment file.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
options:
  unit:
    description: The serving unit.
    type: str
    default: dgxspark-vllm.service
  runtime_kind:
    description: The runtime kind (C(venv) or C(container)).
    type: str
    default: venv
    choices: [venv, container]
  env_file:
    description: The rendered non-secret vLLM environment file.
    type: path
    default: /etc/dgxspark/vllm.env
  nccl_env_file:
    description: The NCCL environment the nic resolver writes before every start.
    type: path
    default: /run/dgxspark/nccl.env
  clock_cap_status_file:
    description: The clock cap's result of this boot.
    type: path
    default: /run/dgxspark/clock-cap.status
  cuda_env_file:
    description: The cuda role's environment file (its C(CUDA_HOME) names the nvcc read).
    type: path
    default: /etc/dgxspark/cuda.env
  proc_root:
    description: Where /proc is read for the loaded driver (C(<proc_root>/driver/nvidia/version)) and the kernel.
    type: path
    default: /proc
  nvidia_smi:
    description: The nvidia-smi to run.
    type: path
    default: /usr/bin/nvidia-smi
  venv_dir:
    description: The runtime venv (the venv kind's vLLM and torch versions are read from its dist-info folders).
    type: path
    default: /opt/dgxspark/vllm
  container_image:
    description: The container kind's image (its id is read with docker image inspect).
    type: str
    default: ""
  unit_file:
    description: The serving unit's file (its ExecStart lines are digested, rank options left out).
    type: path
    default: /etc/systemd/system/dgxspark-vllm.service
  recipe_stamp:
    description:
      - The file the runtime role writes with the DSpark recipe commit it checked out
        (C(<runtime_recipe_dir>/.dgxspark-recipe-commit)); empty when the node runs no recipe.
    type: path
    default: ""
  record_path:
    description: The checkpoint role's verify record.
    type: path
    default: /var/lib/dgxspark/checkpoint-verified.json
  repo_dir:
    description: The checkpoint's hub cache repo folder (C(<cache>/models--org--name)), searched for unfinished files.
    type: path
    required: true
  env_rank_keys:
    description: vllm.env keys that differ by rank by design, left out of the digest.
    type: list
    elements: str
    default: []
  log_lines:
    description: How many lines of the unit's last start are searched for its first error.
    type: int
    default: 200
attributes:
  check_mode:
    support: full
    description: Read-only; runs and reports the same in check mode.
  diff_mode:
    support: none
    description: Nothing to diff.
"""

EXAMPLES = r"""
- name: Read the node's evidence
  dgxspark.cluster.doctor_facts:
    repo_dir: /var/lib/dgxspark/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731
  register: node
"""

RETURN = r"""
nvidia_smi:
  description: nvidia-smi's exit code, output and the queried fields (driver_version, persistence_mode, clocks.sm, clocks.max.sm).
  returned: always
  type: dict
loaded_driver:
  description: The loaded kernel module's version ("" when none).
  returned: always
  type: str
installed_driver:
  description: The installed userspace driver version ("" when none or several).
  returned: always
  type: str
kernel:
  description: The running kernel release.
  returned: always
  type: str
module_builds:
  description: The NVIDIA module builds of the running kernel (a precompiled package, or the dkms module file).
  returned: always
  type: list
  elements: str
held:
  description: Every held package.
  returned: always
  type: list
  elements: str
unheld_driver_packages:
  description: Installed driver packages that are not held.
  returned: always
  type: list
  elements: str
upgrade_moves:
  description: Driver, CUDA and kernel packages apt-get --simulate upgrade would install or remove.
  returned: always
  type: list
  elements: dict
earlyoom:
  description: earlyoom.service's LoadState, ActiveState, UnitFileState.
  returned: always
  type: dict
unit:
  description: The serving unit's ActiveState, SubState, Result, NRestarts, LoadState.
  returned: always
  type: dict
first_error:
  description: The first error line of the unit's last start (when it is not active or its result is not success), else "".
  returned: always
  type: str
clock_cap_status:
  description: The clock cap's status file, null when missing.
  returned: always
  type: str
nccl_env:
  description: The NCCL environment file as a dict, null when missing.
  returned: always
  type: dict
vllm_env:
  description: vllm.env as a dict (non-secret), null when missing.
  returned: always
  type: dict
vllm_env_digest:
  description: sha256 of vllm.env's sorted pairs without O(env_rank_keys).
  returned: always
  type: str
unit_argv_digest:
  description: sha256 of the unit's ExecStart lines without the rank options.
  returned: always
  type: str
unit_exec:
  description:
    - What the serving unit runs and how (the venv kind; {} for the container kind or without an ExecStart), read
      from O(unit_file) - user, group, working_directory, environment_files ([path, optional]), argv, python (the
      venv's, beside ExecStart's first word), node_rank, nnodes, master_addr, master_port.
    - doctor runs its CUDA and NCCL measurements with these (plugins/module_utils/doctor.py collective_argv).
  returned: always
  type: dict
cuda:
  description: The CUDA release nvcc reports (C(13.0 (13.0.88))), "" when not found.
  returned: always
  type: str
runtime_version:
  description: vLLM and torch versions (venv) or the image id (container).
  returned: always
  type: str
recipe_commit:
  description: The DSpark recipe commit checked out on the node (O(recipe_stamp)), "" when none.
  returned: always
  type: str
checkpoint_record:
  description: The verify record, null when missing.
  returned: always
  type: dict
incomplete_files:
  description: The *.incomplete files under O(repo_dir), null when O(repo_dir) does not exist.
  returned: always
  type: list
  elements: str
repo_dir:
  description: O(repo_dir).
  returned: always
  type: str
"""

import glob
import hashlib
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.doctor import (
    exec_start_words,
    normalise_argv,
    parse_env,
    parse_query_gpu,
    unit_exec,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.nvidia_stack import (
    apt_simulation,
    driver_state,
    nvcc_release,
    proc_driver_version,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_logs import first_error, unit_state

GPU_FIELDS = ["driver_version", "persistence_mode", "clocks.sm", "clocks.max.sm"]
MOVES_RE = re.compile(r"^(nvidia-|libnvidia-|linux-|cuda-)")
SHOW = ["LoadState", "ActiveState", "SubState", "Result", "NRestarts", "UnitFileState", "InvocationID"]


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def _run(module, argv):
    """(rc, stdout + stderr); rc 127 when the tool is missing."""
    path = module.get_bin_path(argv[0]) if not os.path.isabs(argv[0]) else (argv[0] if os.path.exists(argv[0]) else None)
    if not path:
        return 127, "%s not found" % argv[0]
    rc, out, err = module.run_command([path] + argv[1:], environ_update={"LC_ALL": "C"})
    return rc, (out or "") + (err or "")


def _show(module, unit):
    rc, out = _run(module, ["systemctl", "show", unit] + ["--property=%s" % p for p in SHOW])
    return unit_state(" ".join(out.splitlines())) if rc == 0 else {"error": out.strip()}


def _digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _dist_version(venv, name):
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "%s-*.dist-info" % name)))
    if not found:
        return ""
    base = os.path.basename(found[-1])[len(name) + 1:-len(".dist-info")]
    return base


def _first_error(module, unit_info, unit, kind, lines):
    if unit_info.get("ActiveState") == "active" and unit_info.get("Result") in ("success", None):
        return ""
    inv = unit_info.get("InvocationID") or ""
    selector = ["_SYSTEMD_INVOCATION_ID=%s" % inv] if inv else ["--unit=%s" % unit]
    rc, out = _run(module, ["journalctl"] + selector + ["--lines", str(lines), "--no-pager", "--output", "short-unix"])
    found = first_error([{"host": "", "lines": out.splitlines()}])
    return found.get("line", "") if found else ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="dgxspark-vllm.service"),
            runtime_kind=dict(type="str", default="venv", choices=["venv", "container"]),
            env_file=dict(type="path", default="/etc/dgxspark/vllm.env"),
            nccl_env_file=dict(type="path", default="/run/dgxspark/nccl.env"),
            clock_cap_status_file=dict(type="path", default="/run/dgxspark/clock-cap.status"),
            cuda_env_file=dict(type="path", default="/etc/dgxspark/cuda.env"),
            proc_root=dict(type="path", default="/proc"),
            nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"),
            venv_dir=dict(type="path", default="/opt/dgxspark/vllm"),
            container_image=dict(type="str", default=""),
            unit_file=dict(type="path", default="/etc/systemd/system/dgxspark-vllm.service"),
            record_path=dict(type="path", default="/var/lib/dgxspark/checkpoint-verified.json"),
            recipe_stamp=dict(type="path", default=""),
            repo_dir=dict(type="path", required=True),
            env_rank_keys=dict(type="list", elements="str", default=[], no_log=False),
            log_lines=dict(type="int", default=200),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, repo_dir=p["repo_dir"])

    rc, out = _run(module, [p["nvidia_smi"], "--query-gpu=%s" % ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"])
    result["nvidia_smi"] = {"rc": rc, "output": out[-2000:], "fields": parse_query_gpu(GPU_FIELDS, out) if rc == 0 else {}}
    result["loaded_driver"] = proc_driver_version(_read(os.path.join(p["proc_root"], "driver", "nvidia", "version")) or "")
    kernel = (_read(os.path.join(p["proc_root"], "sys", "kernel", "osrelease")) or "").strip()
    result["kernel"] = kernel

    rc, dpkg = _run(module, ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n",
                             "nvidia-*", "libnvidia-*", "linux-*"])
    state = driver_state(dpkg, "", kernel=kernel)
    result["installed_driver"] = state["version"]
    builds = [state["kernel_module"]] if state["kernel_module"] else []
    if not builds and kernel and os.path.exists(os.path.join("/lib/modules", kernel, "updates", "dkms", "nvidia.ko")):
        builds = ["dkms /lib/modules/%s/updates/dkms/nvidia.ko" % kernel]
    result["module_builds"] = builds
    result["held"] = state["held"]
    result["unheld_driver_packages"] = sorted(n for n in state["packages"] if n not in state["held"])
    rc, sim = _run(module, ["apt-get", "--simulate", "-o", "Debug::NoLocking=true", "upgrade"])
    result["upgrade_moves"] = [a for a in apt_simulation(sim) if MOVES_RE.match(a["package"])]

    result["earlyoom"] = _show(module, "earlyoom.service")
    unit_info = _show(module, p["unit"])
    result["unit"] = dict((k, v) for k, v in unit_info.items() if k != "InvocationID")
    result["first_error"] = _first_error(module, unit_info, p["unit"], p["runtime_kind"], p["log_lines"])

    status = _read(p["clock_cap_status_file"])
    result["clock_cap_status"] = status.strip() if status is not None else None
    nccl = _read(p["nccl_env_file"])
    result["nccl_env"] = parse_env(nccl) if nccl is not None else None
    env_text = _read(p["env_file"])
    env = parse_env(env_text) if env_text is not None else None
    result["vllm_env"] = env
    kept = sorted((k, v) for k, v in (env or {}).items() if k not in p["env_rank_keys"])
    result["vllm_env_digest"] = _digest(json.dumps(kept)) if env is not None else ""
    unit_text = _read(p["unit_file"])
    argv = normalise_argv(exec_start_words(unit_text))
    result["unit_argv_digest"] = _digest(json.dumps(argv)) if argv else ""
    result["unit_exec"] = unit_exec(unit_text) if p["runtime_kind"] == "venv" else {}

    cuda_home = parse_env(_read(p["cuda_env_file"]) or "").get("CUDA_HOME") or "/usr/local/cuda"
    rc, out = _run(module, [os.path.join(cuda_home, "bin", "nvcc"), "--version"])
    release = nvcc_release(out) if rc == 0 else {"release": "", "version": ""}
    result["cuda"] = ("%s (%s)" % (release["release"], release["version"])) if release["release"] else ""

    if p["runtime_kind"] == "venv":
        vllm, torch = _dist_version(p["venv_dir"], "vllm"), _dist_version(p["venv_dir"], "torch")
        result["runtime_version"] = ("vllm %s, torch %s" % (vllm, torch or "?")) if vllm else ""
    else:
        rc, out = _run(module, ["docker", "image", "inspect", "--format", "{{.Id}}", p["container_image"]])
        result["runtime_version"] = "image %s" % out.strip() if rc == 0 and out.strip() else ""

    stamp = _read(p["recipe_stamp"]) if p["recipe_stamp"] else None
    result["recipe_commit"] = stamp.strip()[:200] if stamp else ""

    record = _read(p["record_path"])
    try:
        result["checkpoint_record"] = json.loads(record) if record else None
    except ValueError:
        result["checkpoint_record"] = {"unreadable": record[:200]}
    if os.path.isdir(p["repo_dir"]):
        found = []
        for root, _dirs, files in os.walk(p["repo_dir"]):
            found.extend(os.path.join(root, f) for f in files if f.endswith(".incomplete"))
        result["incomplete_files"] = sorted(found)
    else:
        result["incomplete_files"] = None
    module.exit_json(**result)


if __name__ == "__main__":
    main()
