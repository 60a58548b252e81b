#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_sync
short_description: Push a checkpoint's repo folder from the head to a worker with parallel rsync streams
version_added: 0.1.0
description:
  - Runs on the head. Splits the blobs of O(src) over several rsync streams balanced by size (one per
    core by default), after one pass that creates the directories alone (so no two streams race to create one),
    then runs one pass over the whole tree (snapshot symlinks, refs) so nothing is left behind.
  - C(rsync -a --partial), no compression; an interrupted copy keeps its partial files and the next run
    resumes from them. O(repair) paths are sent again with C(--ignore-times) (content corrupted while
    size and mtime look right).
  - Transport C(ssh) (default) uses a dedicated key, pinned host keys (never StrictHostKeyChecking=no)
    and the seeds' cipher C(aes128-gcm@openssh.com). Transport C(daemon) talks to an rsync daemon the
    caller started on the worker's fabric address (plain TCP, for the private point-to-point link).
  - Every rsync gets an I/O timeout (C(--timeout)) and the whole sync a wall-clock limit, O(timeout); on
    expiry the streams are terminated and the module fails, so a broken peer cannot hang the play.
  - Runs rsync as O(run_as) (privileges dropped), with the daemon password only in the environment.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  src:
    description: The repo folder on the head (C(.../models--<org>--<name>)).
    type: path
    required: true
  dest_host:
    description: The worker's fabric address.
    type: str
    required: true
  dest_path:
    description:
      - Transport C(ssh) - the destination path as the worker's sshd sees it (relative to the directory a
        forced C(rrsync) command confines the key to).
      - Transport C(daemon) - the path inside the daemon module (empty for the module's root).
    type: str
    default: ""
  transport:
    description: C(ssh) (encrypted, default) or C(daemon) (plain rsync protocol on the private link).
    type: str
    choices: [ssh, daemon]
    default: ssh
  user:
    description: The ssh user or the daemon's auth user on the worker.
    type: str
    required: true
  ssh_key:
    description: Private key of the transfer (transport C(ssh)).
    type: path
  known_hosts:
    description: known_hosts file holding the worker's host key under its fabric address (transport C(ssh)).
    type: path
  ssh_cipher:
    description: ssh cipher (the seeds use C(aes128-gcm@openssh.com)); empty for ssh's default.
    type: str
    default: aes128-gcm@openssh.com
  ssh_port:
    description: sshd port on the worker.
    type: int
    default: 22
  daemon_port:
    description: Port of the rsync daemon (transport C(daemon)).
    type: int
    default: 8873
  daemon_module:
    description: Module name of the rsync daemon (transport C(daemon)).
    type: str
    default: checkpoint
  daemon_password:
    description: Password of O(user) at the daemon (passed in the environment, never in argv).
    type: str
  streams:
    description: Parallel rsync streams for the blobs; C(0) = one per core of the head, at most 8.
    type: int
    default: 0
  io_timeout:
    description: rsync C(--timeout) - seconds without data before a stream gives up.
    type: int
    default: 300
  timeout:
    description: Wall-clock limit of the whole sync in seconds; the streams are terminated after it.
    type: int
    default: 21600
  bwlimit:
    description: C(--bwlimit) per stream in KiB/s (0 = none).
    type: int
    default: 0
  repair:
    description: Paths relative to O(src) to send again even when size and mtime match.
    type: list
    elements: str
    default: []
  run_as:
    description: User to run rsync as (the owner of the key); default the caller.
    type: str
"""

EXAMPLES = r"""
- name: Sync the checkpoint to a worker over ssh
  dgxspark.cluster.checkpoint_sync:
    src: /var/lib/dgxspark/hf/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731
    dest_host: 192.168.100.2
    dest_path: models--deepseek-ai--DeepSeek-V4-Flash-0731
    user: dgxspark-ckpt
    ssh_key: /var/lib/dgxspark/checkpoint/.ssh/id_ed25519
    known_hosts: /var/lib/dgxspark/checkpoint/.ssh/known_hosts
    run_as: dgxspark-ckpt
  delegate_to: spark-head
"""

RETURN = r"""
streams:
  description: Parallel blob streams used.
  type: int
  returned: success
stats:
  description: rsync --stats of every pass, summed (files_transferred, literal_data, matched_data, bytes_sent, items, ...).
  type: dict
  returned: success
seconds:
  description: Wall-clock duration of the sync.
  type: float
  returned: always
throughput:
  description: Bytes of file data moved per second (literal + matched data / seconds).
  type: float
  returned: success
skipped_repair:
  description: O(repair) paths absent on the head (left to the caller to remove on the worker).
  type: list
  elements: str
  returned: success
msg:
  description: One line about what moved.
  type: str
  returned: always
"""

import os
import pwd
import shutil
import tempfile
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache, rsync_plan


def _run_parallel(module, argvs, env, run_as, deadline, started):
    """Run rsync argvs at once (one thread each, ``module.run_command``), each under ``timeout(1)``
    with what is left of the wall-clock budget; fails the module on error or when time runs out.
    Returns the outputs."""
    remaining = int(deadline - time.time())
    if remaining <= 0:
        _timed_out(module, started)
    results = [None] * len(argvs)
    prefix = ["timeout", "--signal=TERM", "--kill-after=15", str(remaining)]
    if run_as:
        prefix += ["runuser", "-u", run_as, "--"]

    def run(index, argv):
        results[index] = module.run_command(prefix + argv, environ_update=env)
    threads = [threading.Thread(target=run, args=(i, argv)) for i, argv in enumerate(argvs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if any(rc in (124, 137) for rc, _out, _err in results):
        _timed_out(module, started)
    for argv, (rc, out, err) in zip(argvs, results):
        if rc not in (0, 24):
            module.fail_json(msg="rsync to %s exited %d: %s" % (module.params["dest_host"], rc,
                                                                (err or out).strip()[-1500:]),
                             cmd=" ".join(argv), rc=rc, seconds=round(time.time() - started, 1))
    return [out for _rc, out, _err in results]


def _timed_out(module, started):
    module.fail_json(msg="checkpoint sync to %s timed out after %ds (timeout): the streams were stopped; "
                     "partial files stay (--partial) and the next run resumes from them"
                     % (module.params["dest_host"], module.params["timeout"]),
                     seconds=round(time.time() - started, 1), timed_out=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest_host=dict(type="str", required=True),
            dest_path=dict(type="str", default=""),
            transport=dict(type="str", choices=["ssh", "daemon"], default="ssh"),
            user=dict(type="str", required=True),
            ssh_key=dict(type="path"),
            known_hosts=dict(type="path"),
            ssh_cipher=dict(type="str", default=rsync_plan.SSH_CIPHER),
            ssh_port=dict(type="int", default=22),
            daemon_port=dict(type="int", default=8873),
            daemon_module=dict(type="str", default="checkpoint"),
            daemon_password=dict(type="str", no_log=True),
            streams=dict(type="int", default=0),
            io_timeout=dict(type="int", default=300),
            timeout=dict(type="int", default=21600),
            bwlimit=dict(type="int", default=0),
            repair=dict(type="list", elements="str", default=[]),
            run_as=dict(type="str"),
        ),
        required_if=[("transport", "ssh", ("ssh_key", "known_hosts")),
                     ("transport", "daemon", ("daemon_password",))],
        supports_check_mode=False,
    )
    params = module.params
    started = time.time()
    deadline = started + params["timeout"]
    src = params["src"].rstrip("/")
    if not os.path.isdir(os.path.join(src, "blobs")):
        module.fail_json(msg="%s has no blobs/: nothing to sync (verify the head first)" % src)
    rsync = shutil.which("rsync") or module.fail_json(msg="rsync is not installed on the head")
    if params["run_as"]:
        try:
            pwd.getpwnam(params["run_as"])
        except KeyError:
            module.fail_json(msg="run_as user %s does not exist" % params["run_as"])
    env = {}
    ssh = None
    if params["transport"] == "ssh":
        ssh = rsync_plan.ssh_command(params["ssh_key"], params["known_hosts"], params["ssh_cipher"],
                                     port=params["ssh_port"])
        dest = "%s@%s:%s" % (params["user"], params["dest_host"], params["dest_path"] or ".")
    else:
        env["RSYNC_PASSWORD"] = params["daemon_password"]
        dest = "rsync://%s@%s:%d/%s/%s" % (params["user"], params["dest_host"], params["daemon_port"],
                                           params["daemon_module"], params["dest_path"].strip("/"))

    blobs = []
    for path in hf_cache.blob_paths(src):
        name = os.path.basename(path)
        if hf_cache.blob_kind(name) in ("sha256", "git"):
            blobs.append(("blobs/" + name, os.path.getsize(path)))
    streams = rsync_plan.stream_count(params["streams"], os.cpu_count(), blobs)
    groups = rsync_plan.plan_streams(blobs, streams)
    repair = [p for p in params["repair"] if os.path.lexists(os.path.join(src, p))]
    skipped = [p for p in params["repair"] if p not in repair]

    workdir = tempfile.mkdtemp(prefix="dgxspark-sync-")
    outputs = []
    try:
        os.chmod(workdir, 0o755)

        def files_from(name, paths):
            path = os.path.join(workdir, name)
            with open(path, "w") as handle:
                handle.write("".join(p + "\n" for p in paths))
            os.chmod(path, 0o644)
            return path

        common = dict(io_timeout=params["io_timeout"], ssh=ssh, bwlimit=params["bwlimit"], rsync=rsync)
        if repair:
            outputs += _run_parallel(module, [rsync_plan.rsync_argv(
                src, dest, files_from=files_from("repair", repair), ignore_times=True, **common)],
                env, params["run_as"], deadline, started)
        # the directories first, in one stream: parallel streams must not race to create them
        outputs += _run_parallel(module, [rsync_plan.rsync_argv(src, dest, dirs_only=True, **common)],
                                 env, params["run_as"], deadline, started)
        outputs += _run_parallel(module, [rsync_plan.rsync_argv(
            src, dest, files_from=files_from("stream%d" % i, group), **common) for i, group in enumerate(groups)],
            env, params["run_as"], deadline, started)
        outputs += _run_parallel(module, [rsync_plan.rsync_argv(src, dest, **common)], env, params["run_as"], deadline, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    stats = rsync_plan.merge_stats(rsync_plan.parse_stats(text) for text in outputs)
    seconds = time.time() - started
    moved = stats.get("literal_data", 0) + stats.get("matched_data", 0)
    throughput = moved / seconds if seconds > 0 else 0.0
    changed = stats.get("items", 0) > 0
    module.exit_json(
        changed=changed, streams=len(groups), stats=stats, seconds=round(seconds, 2),
        throughput=round(throughput, 1), skipped_repair=skipped,
        msg="%s to %s over %s in %d stream(s): %d file(s) transferred, %s sent (%s/s), %s matched%s"
            % (src, params["dest_host"], params["transport"], len(groups), stats.get("files_transferred", 0),
               hf_cache.human_bytes(stats.get("literal_data", 0)), hf_cache.human_bytes(throughput),
               hf_cache.human_bytes(stats.get("matched_data", 0)), " (repaired %d)" % len(repair) if repair else ""),
    )


if __name__ == "__main__":
    main()
