#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_verify
short_description: Verify a pinned checkpoint in a Hugging Face hub cache
version_added: 0.1.0
description:
  - Checks one repo at one commit in a hub cache (the layout C(hf download) writes) and reports every
    problem found, without failing; the caller decides (the checkpoint role asserts C(ok)).
  - The snapshot for the revision exists; C(refs/main) holds exactly the 40-byte sha with no newline
    (a revision-pinned download does not write it and an offline start then fails with
    LocalEntryNotFoundError); every shard named in C(model.safetensors.index.json) is present; no
    C(*.incomplete) blob is left; every snapshot symlink resolves inside the repo's C(blobs/).
  - With O(manifest) (what the hub lists for the revision), every listed file is present with the
    listed size and blob. With O(full_hash), every blob is re-hashed and compared with its name
    (sha256 for LFS files, the git blob id for small files); by default only names and sizes are checked.
  - Rejects lookalike checkpoints (same architecture and shard counts) by repo id, revision, commit
    date and README, with a message naming which one it is.
  - Returns a cheap fingerprint of the repo folder (paths, sizes, whole-second mtimes, link targets;
    no content read) so two copies made with C(rsync -a) can be compared without hashing.
  - Optionally writes C(refs/main) (O(write_ref)) and drops the blobs from the page cache (O(evict_page_cache)).
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only in check mode; a needed O(write_ref) is reported as a change, not written.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  cache_dir:
    description: The hub cache (C(HF_HUB_CACHE)), the parent of C(models--<org>--<name>).
    type: path
    required: true
  repo_id:
    description: The repo, for example C(deepseek-ai/DeepSeek-V4-Flash-0731).
    type: str
    required: true
  revision:
    description: The pinned commit (40 hex characters).
    type: str
    required: true
  manifest:
    description:
      - What the hub lists for the revision, C({repo_id, revision, last_modified, readme_head,
        files{path{size, blob, lfs}}}). Without it sizes and blob names cannot be compared.
    type: dict
  full_hash:
    description: Re-hash every blob the snapshot uses (reads the whole checkpoint).
    type: bool
    default: false
  write_ref:
    description: Make C(refs/<ref_name>) hold exactly the revision, no newline, before checking.
    type: bool
    default: false
  ref_name:
    description: The ref an offline start resolves.
    type: str
    default: main
  owner:
    description: Owner of a written ref (user name); default the caller.
    type: str
  lookalikes:
    description:
      - Known lookalike checkpoints, each C({name, repo_id, revision, date, readme_marker}); any field
        that matches names the lookalike in a problem of kind C(lookalike).
    type: list
    elements: dict
    default: []
  min_commit_date:
    description: The commit must not be older than this date (C(YYYY-MM-DD)); needs O(manifest).
    type: str
  check_lookalike:
    description: Run the lookalike checks (turn off only to use another checkpoint on purpose).
    type: bool
    default: true
  prune_other_revisions:
    description:
      - Before checking, remove the repo folder's other snapshots and the blobs the revision's snapshot does not use
        (a pin change's old revision). Only when the revision's snapshot exists. Reported as a change.
    type: bool
    default: false
  evict_page_cache:
    description:
      - After checking, flush the blobs (C(fdatasync), a sync's pages are dirty) and ask the kernel to drop their
        pages (C(posix_fadvise) DONTNEED); reports C(Cached) from C(/proc/meminfo) and the blobs' resident bytes
        (C(mincore)) before and after.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Verify the checkpoint on this node, writing refs/main
  dgxspark.cluster.checkpoint_verify:
    cache_dir: /var/lib/dgxspark/hf/hub
    repo_id: deepseek-ai/DeepSeek-V4-Flash-0731
    revision: 9e165c30e2704aec5d9d593cce3eebd58bbef1cb
    manifest: "{{ __checkpoint_manifest }}"
    write_ref: true
    lookalikes:
      - name: DeepSeek-V4-Flash-DSpark
        repo_id: deepseek-ai/DeepSeek-V4-Flash-DSpark
        date: "2026-07-04"
  register: verify

- name: Stop unless it is clean
  ansible.builtin.assert:
    that: verify.ok
    fail_msg: "{{ verify.summary | join(' | ') }}"
"""

RETURN = r"""
ok:
  description: No problem found.
  type: bool
  returned: always
problems:
  description: Every finding, C({kind, path, detail}); C(path) is relative to the repo folder.
  type: list
  elements: dict
  returned: always
  sample: [{"kind": "ref_newline", "path": "refs/main", "detail": "holds '9e16...cb\\n' ..."}]
summary:
  description: The problems as short lines (at most 8, then a count).
  type: list
  elements: str
  returned: always
repair:
  description: Paths (relative to the repo folder) a re-transfer must rewrite even if size and mtime match.
  type: list
  elements: str
  returned: always
repairable:
  description: Every problem is one a re-sync from a good copy fixes.
  type: bool
  returned: always
fingerprint:
  description: sha256 over the repo folder's paths, sizes, mtimes and link targets (no content read).
  type: str
  returned: always
repo_dir:
  description: The repo folder.
  type: str
  returned: always
snapshot:
  description: The snapshot folder of the revision.
  type: str
  returned: always
files:
  description: Files in the snapshot.
  type: int
  returned: always
shards:
  description: Shards named by the index.
  type: int
  returned: always
bytes:
  description: Bytes in the repo folder.
  type: int
  returned: always
hashed_bytes:
  description: Bytes re-hashed (the small files always, the shards with O(full_hash)).
  type: int
  returned: always
ref_written:
  description: refs/<ref_name> was (or in check mode would be) rewritten.
  type: bool
  returned: always
evicted_bytes:
  description: Bytes advised out of the page cache.
  type: int
  returned: always
pruned:
  description: With O(prune_other_revisions), C({snapshots, blobs, bytes}) removed (or, in check mode, to remove).
  type: dict
  returned: always
page_cache:
  description: With O(evict_page_cache), C({cached_before_kb, cached_after_kb, resident_before, resident_after, msg})
    (Cached from /proc/meminfo; the blobs' bytes in the page cache, from mincore).
  type: dict
  returned: always
seconds:
  description: Time the check took.
  type: float
  returned: always
"""

import os
import pwd
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache, memory


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", required=True),
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            manifest=dict(type="dict"),
            full_hash=dict(type="bool", default=False),
            write_ref=dict(type="bool", default=False),
            ref_name=dict(type="str", default="main"),
            owner=dict(type="str"),
            lookalikes=dict(type="list", elements="dict", default=[]),
            min_commit_date=dict(type="str"),
            check_lookalike=dict(type="bool", default=True),
            evict_page_cache=dict(type="bool", default=False),
            prune_other_revisions=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    repo_dir = os.path.join(params["cache_dir"], hf_cache.repo_folder(params["repo_id"]))
    ref_written = False
    links = hf_cache.link_problems(repo_dir)
    if links:
        module.fail_json(msg="%s: refused, nothing written or removed: %s (the checkpoint user owns this tree; a link "
                         "here would point root's steps elsewhere). Remove the links as that user, then re-run"
                         % (repo_dir, "; ".join("%s is %s" % (os.path.join(repo_dir, rel) if rel else repo_dir, why)
                                                for rel, why in links)),
                         links=[os.path.join(repo_dir, rel) for rel, _why in links])
    snapshot = os.path.join(repo_dir, "snapshots", params["revision"])
    if params["write_ref"] and hf_cache.is_commit(params["revision"]) and os.path.isdir(snapshot):
        if hf_cache.read_ref(repo_dir, params["ref_name"]) != params["revision"].encode():
            ref_written = True
            if not module.check_mode:
                uid = gid = -1
                if params["owner"]:
                    try:
                        entry = pwd.getpwnam(params["owner"])
                    except KeyError:
                        module.fail_json(msg="owner %s does not exist" % params["owner"])
                    uid, gid = entry.pw_uid, entry.pw_gid
                try:
                    hf_cache.write_ref(repo_dir, params["revision"], params["ref_name"], uid, gid)
                except hf_cache.LinkRefused as error:
                    module.fail_json(msg=str(error))
    pruned = {"snapshots": [], "blobs": [], "bytes": 0}
    if params["prune_other_revisions"]:
        pruned = hf_cache.prune_plan(repo_dir, params["revision"])
        if not module.check_mode:
            try:
                hf_cache.prune(repo_dir, pruned)
            except (hf_cache.LinkRefused, OSError) as error:
                module.fail_json(msg="%s: cannot remove the other revisions: %s" % (repo_dir, error))
    started = time.time()
    try:
        report = hf_cache.verify_cache(
            params["cache_dir"], params["repo_id"], params["revision"], manifest=params["manifest"],
            full_hash=params["full_hash"], ref_name=params["ref_name"], lookalikes=params["lookalikes"],
            min_commit_date=params["min_commit_date"], check_lookalike=params["check_lookalike"])
    except (OSError, ValueError) as error:
        module.fail_json(msg="cannot verify %s in %s: %s" % (params["repo_id"], params["cache_dir"], error))
    if module.check_mode and ref_written:
        report["problems"] = [p for p in report["problems"] if not p["kind"].startswith("ref_")]
        report["ok"] = not report["problems"]
    evicted = 0
    page_cache = {}
    if params["evict_page_cache"] and not module.check_mode:
        paths = hf_cache.blob_paths(repo_dir)
        before = memory.read_meminfo().get("Cached", 0)
        resident_before = sum(hf_cache.resident_bytes(p) for p in paths)
        evicted = hf_cache.evict_page_cache(paths)
        resident_after = sum(hf_cache.resident_bytes(p) for p in paths)
        after = memory.read_meminfo().get("Cached", 0)
        page_cache = {
            "cached_before_kb": before, "cached_after_kb": after,
            "resident_before": resident_before, "resident_after": resident_after,
            "msg": "page cache (Cached) %s -> %s; the checkpoint's blobs in it %s -> %s (%d files flushed and dropped)"
                   % (hf_cache.human_bytes(before * 1024), hf_cache.human_bytes(after * 1024),
                      hf_cache.human_bytes(resident_before), hf_cache.human_bytes(resident_after), len(paths)),
        }
    report.update(
        changed=ref_written or bool(pruned["snapshots"] or pruned["blobs"]),
        pruned=pruned,
        ref_written=ref_written,
        summary=hf_cache.summarize(report["problems"]),
        repairable=all(p["kind"] in hf_cache.REPAIRABLE for p in report["problems"]),
        evicted_bytes=evicted,
        page_cache=page_cache,
        seconds=round(time.time() - started, 3),
    )
    module.exit_json(**report)


if __name__ == "__main__":
    main()
