#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_download
short_description: Run the checkpoint download as one transient systemd unit and wait on it with progress
version_added: 0.2.0
description:
  - O(state=started) finds every C(hf download) into O(cache_dir) still running (the unit of an interrupted
    run, or an older release's asynchronous job, read from C(/proc)), stops it (SIGTERM, then SIGKILL), and starts
    O(argv) as the transient unit O(unit) (C(systemd-run), C(RemainAfterExit=yes), C(RuntimeMaxSec) set to O(timeout)),
    so there is never a second downloader. The new one skips every finished file and fetches each unfinished one
    again from its start (huggingface_hub 2.x writes a new process-unique C(.incomplete) file and never resumes a
    stopped downloader's); those leftover partial files are removed once their blobs are complete.
  - O(state=waited) waits at most O(wait) seconds in one call, sampling every O(poll) seconds the bytes under
    C(blobs/) and appending one progress line per sample (done of total, rate, time left) to O(progress_log).
    It returns when the unit's process ended or the time is up; the caller loops (a bounded loop, no recursion).
    A finished unit is cleaned up (stopped, failed state reset); a failed one fails the module with its log's tail.
  - O(state=stopped) stops the unit and every other downloader into O(cache_dir).
  - The token is never handled here; hf reads it from the 0600 file C(HF_TOKEN_PATH) names.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: O(state=started) and O(state=stopped) report what they would do; O(state=waited) reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state:
    description: What to do.
    type: str
    choices: [started, waited, stopped]
    required: true
  unit:
    description: The transient unit's name (without C(.service)).
    type: str
    default: dgxspark-checkpoint-download
  cache_dir:
    description: The hub cache the download writes (C(--cache-dir)); every C(hf download) into it is one of ours.
    type: path
    required: true
  argv:
    description: The download command (O(state=started)).
    type: list
    elements: str
  user:
    description: The user the unit runs as (O(state=started)).
    type: str
  environment:
    description: The unit's environment (O(state=started)); paths and switches only, never a secret.
    type: dict
  unit_description:
    description: The unit's description (names repo and revision, shown for a leftover).
    type: str
    default: dgxspark checkpoint download
  timeout:
    description: Seconds the unit may run (C(RuntimeMaxSec)).
    type: int
    default: 28800
  log:
    description: File receiving hf's output (truncated at start).
    type: path
  progress_log:
    description: File receiving one progress line per sample (truncated at start).
    type: path
  repo_dir:
    description: The repo folder whose C(blobs/) are measured (O(state=waited)).
    type: path
  total_bytes:
    description: The checkpoint's size (from the hub's listing).
    type: int
    default: 0
  poll:
    description: Seconds between samples.
    type: float
    default: 30
  wait:
    description: Seconds one call waits at most (at least one sample).
    type: float
    default: 30
  window:
    description: Seconds of samples the rate is taken over.
    type: float
    default: 60
  blobs:
    description: The blob names the revision consists of (from the manifest); only they count as done. Empty, every
      file under C(blobs/) counts.
    type: list
    elements: str
    default: []
  samples:
    description: The O(samples) the previous call returned (the rate's window across calls).
    type: list
    elements: raw
    default: []
"""

EXAMPLES = r"""
- name: Start the download (stops a leftover downloader first)
  dgxspark.cluster.checkpoint_download:
    state: started
    cache_dir: /var/lib/dgxspark/huggingface/hub
    argv: [/opt/dgxspark/hf-tools/bin/hf, download, deepseek-ai/DeepSeek-V4-Flash-0731, --revision,
           9e165c30e2704aec5d9d593cce3eebd58bbef1cb, --cache-dir, /var/lib/dgxspark/huggingface/hub]
    user: dgxspark-ckpt
    environment: {HF_TOKEN_PATH: /var/lib/dgxspark/checkpoint-state/token}
    log: /var/lib/dgxspark/checkpoint-state/download.log
    progress_log: /var/lib/dgxspark/checkpoint-state/download-progress.log

- name: Wait with a progress line per poll (one bounded loop)
  dgxspark.cluster.checkpoint_download:
    state: waited
    cache_dir: /var/lib/dgxspark/huggingface/hub
    repo_dir: /var/lib/dgxspark/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731
    total_bytes: 166900000000
    poll: 30
    wait: 30
    samples: "{{ waited.samples | default([]) }}"
    progress_log: /var/lib/dgxspark/checkpoint-state/download-progress.log
  loop: "{{ range(962) | list }}"
  loop_control:
    label: "{{ waited.msg | default('') }}"
    break_when: waited.finished | default(true)
  register: waited
"""

RETURN = r"""
leftovers:
  description: Downloaders found running before the start (O(state=started), O(state=stopped)), C({pid, argv, unit}).
  type: list
  elements: dict
  returned: always
finished:
  description: The unit's process has ended (O(state=waited)).
  type: bool
  returned: when state is waited
exit_status:
  description: hf's exit status (null when it did not exit by itself).
  type: int
  returned: when state is waited
reason:
  description: systemd's Result for the unit (success, exit-code, timeout, signal, not-found) or running.
  type: str
  returned: when state is waited
polls:
  description: Samples taken in this call.
  type: int
  returned: when state is waited
msg:
  description: The last progress line.
  type: str
  returned: always
  sample: 12.3 GB of 166.9 GB (7.4%), 105.0 MB/s, 24 min 32 s left
stale_partials:
  description: Unfinished files of blobs now complete (a stopped downloader's), removed after a successful download.
  type: list
  elements: str
  returned: when state is waited
samples:
  description: The rate's window, to pass to the next call.
  type: list
  returned: when state is waited
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache, hf_download, safe_dirs


def show(module, unit):
    rc, out, _err = module.run_command(["systemctl", "show", "--property=" + ",".join(hf_download.SHOW_PROPERTIES),
                                        unit + ".service"])
    return hf_download.parse_show(out) if rc == 0 else {}


def describe(found):
    """One leftover as text: its pid, and its unit or its command."""
    if found["unit"]:
        return "pid %s (%s, %s, since %s)" % (found["pid"], found["unit"], found.get("description"), found.get("since"))
    return "pid %s (%s ...)" % (found["pid"], " ".join(found["argv"][:6]))


def truncate(path):
    if path:
        with open(path, "w", encoding="utf-8"):
            pass


def leftovers(module, unit, cache_dir):
    """The unit (when it runs) and every other downloader into cache_dir."""
    found = []
    state = show(module, unit)
    main_pid = int(state.get("MainPID") or 0)
    if hf_download.unit_running(state):
        found.append({"pid": main_pid, "argv": hf_download.read_argv(main_pid) if main_pid else [],
                      "unit": unit + ".service", "description": state.get("Description", ""),
                      "since": state.get("ActiveEnterTimestamp", "")})
    for proc in hf_download.find_downloaders(cache_dir, exclude=(os.getpid(), main_pid)):
        proc["unit"] = ""
        found.append(proc)
    return state, found


def stop_all(module, unit, cache_dir, found, state):
    if state.get("LoadState") not in (None, "", "not-found"):
        module.run_command(["systemctl", "stop", unit + ".service"])
        module.run_command(["systemctl", "reset-failed", unit + ".service"])
    remaining = [p["pid"] for p in hf_download.find_downloaders(cache_dir, exclude=(os.getpid(),))]
    still = hf_download.stop_pids(remaining)
    if still:
        module.fail_json(msg="could not stop the earlier hf download into %s (pids %s still run): stop it, then run again"
                         % (cache_dir, ", ".join(str(p) for p in still)), leftovers=found)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["started", "waited", "stopped"]),
            unit=dict(type="str", default=hf_download.UNIT),
            cache_dir=dict(type="path", required=True),
            argv=dict(type="list", elements="str"),
            user=dict(type="str"),
            environment=dict(type="dict"),
            unit_description=dict(type="str", default="dgxspark checkpoint download"),
            timeout=dict(type="int", default=28800),
            log=dict(type="path"),
            progress_log=dict(type="path"),
            repo_dir=dict(type="path"),
            total_bytes=dict(type="int", default=0),
            poll=dict(type="float", default=30),
            wait=dict(type="float", default=30),
            window=dict(type="float", default=60),
            blobs=dict(type="list", elements="str", default=[]),
            samples=dict(type="list", elements="raw", default=[]),
        ),
        required_if=[("state", "started", ("argv", "user", "log")), ("state", "waited", ("repo_dir",))],
        supports_check_mode=True,
    )
    p = module.params
    unit = p["unit"]
    if p["state"] in ("started", "stopped"):
        state, found = leftovers(module, unit, p["cache_dir"])
        described = "; ".join(describe(f) for f in found)
        if module.check_mode:
            module.exit_json(changed=bool(found) or p["state"] == "started", leftovers=found,
                             msg="would stop %s" % described if found else "nothing runs")
        stop_all(module, unit, p["cache_dir"], found, state)
        if p["state"] == "stopped":
            module.exit_json(changed=bool(found), leftovers=found,
                             msg=("stopped %s" % described) if found else "no download ran")
        truncate(p["progress_log"])
        cmd = hf_download.systemd_run_argv(unit, p["argv"], p["user"], p["environment"], p["timeout"], p["log"],
                                           p["unit_description"], workdir=os.path.dirname(p["log"]))
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg="systemd-run could not start the download unit %s: %s" % (unit, (err or out).strip()),
                             leftovers=found)
        module.exit_json(changed=True, leftovers=found, unit=unit + ".service",
                         msg=("stopped the download left by an earlier run (%s); " % described if found else "")
                         + "started %s" % unit)

    # waited
    handle = open(p["progress_log"], "a", encoding="utf-8", buffering=1) if p["progress_log"] else None
    state = {"now": show(module, unit)}
    main_pid = int(state["now"].get("MainPID") or 0)

    def status():
        alive = main_pid and os.path.exists("/proc/%d" % main_pid)
        if alive and hf_download.unit_running(state["now"]):
            return False, None, "running"
        state["now"] = show(module, unit)
        return hf_download.unit_outcome(state["now"])

    def write(text):
        if handle:
            handle.write(text + "\n")

    def measure(repo_dir):
        return hf_download.manifest_bytes(repo_dir, p["blobs"]) if p["blobs"] else hf_cache.blob_bytes(repo_dir)

    try:
        result = hf_download.wait(p["repo_dir"], p["total_bytes"], p["poll"], p["wait"], status,
                                  samples=p["samples"], window=p["window"], write=write, measure=measure)
    finally:
        if handle:
            handle.close()
    result["stale_partials"] = []
    if result["finished"] and not module.check_mode:
        module.run_command(["systemctl", "stop", unit + ".service"])
        module.run_command(["systemctl", "reset-failed", unit + ".service"])
        if result["exit_status"] == 0:
            try:
                result["stale_partials"] = hf_download.remove_stale_partials(p["repo_dir"])
            except (OSError, safe_dirs.UnsafePath) as error:
                result["msg"] = "%s: unfinished files left in place: %s" % (p["repo_dir"], error)
    if result["finished"] and result["exit_status"] != 0:
        log_tail = hf_download.tail(p["log"]) if p["log"] else ""
        result["msg"] = ("hf download ended with %s (rc %s) at %s. The files already finished stay in %s; a re-run "
                         "fetches only the others, each unfinished file from its start. Its log (%s): %s"
                         % (result["reason"], result["exit_status"], result["msg"], p["cache_dir"], p["log"], log_tail))
        module.fail_json(**result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
