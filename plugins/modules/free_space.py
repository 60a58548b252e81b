#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: free_space
short_description: Free space of the filesystem a path will live on, and what a checkpoint already has there
version_added: 0.1.0
description:
  - Finds O(path) or, when it does not exist yet, its nearest existing parent directory, and reports the free
    space of that filesystem (C(statvfs), the space an unprivileged writer gets).
  - With O(repo_dir), also sums the bytes under its C(blobs/) (finished and C(.incomplete) blobs of a Hugging Face
    hub cache folder), so a caller can ask for the free space the rest of a download needs. Reads only.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description: The directory that will hold the data (it need not exist yet).
    type: path
    required: true
  repo_dir:
    description: A hub cache repo folder (C(.../models--<org>--<name>)) whose C(blobs/) bytes are already there.
    type: path
  size_gb:
    description: Size of the data the path will hold, in GB (10^9 bytes); RV(needed_bytes) is what is not there yet.
    type: int
    default: 0
  blobs:
    description:
      - The blobs a revision consists of (name -> size, from the hub's listing). With O(repo_dir), RV(needed_bytes) is
        what of exactly these blobs is not there yet (in a pin change the shards the old revision shares count as
        present, the old revision's other blobs do not), and O(size_gb) is ignored. Only a blob finished at its listed
        size counts as present; a partial one (an interrupted hf download's C(.incomplete), an interrupted rsync's
        C(--partial) file) needs its whole size again, since neither tool writes the rest into it.
    type: dict
"""

EXAMPLES = r"""
- name: Read the free space of the HF cache's filesystem
  dgxspark.cluster.free_space:
    path: /var/lib/dgxspark/huggingface/hub
    repo_dir: /var/lib/dgxspark/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731
    size_gb: 170
  register: space

- name: Stop if the checkpoint does not fit
  ansible.builtin.assert:
    that: space.free_bytes >= space.needed_bytes
"""

RETURN = r"""
path:
  description: O(path), normalised.
  type: str
  returned: always
exists:
  description: Whether O(path) is an existing directory.
  type: bool
  returned: always
checked:
  description: The directory whose filesystem was measured (O(path) or its nearest existing parent).
  type: str
  returned: always
  sample: /var/lib
free_bytes:
  description: Bytes available to an unprivileged writer on that filesystem.
  type: int
  returned: always
total_bytes:
  description: Size of that filesystem in bytes.
  type: int
  returned: always
present_bytes:
  description: Bytes under O(repo_dir)/blobs (0 without O(repo_dir) or when it does not exist); with O(blobs), the bytes
    of those blobs finished at their listed size.
  type: int
  returned: always
needed_bytes:
  description: O(size_gb) less RV(present_bytes), at least 0 - the free bytes the rest of the data needs (with O(blobs),
    what of those blobs is missing).
  type: int
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache
from ansible_collections.dgxspark.cluster.plugins.module_utils import preflight


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            repo_dir=dict(type="path"),
            size_gb=dict(type="int", default=0),
            blobs=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    path = os.path.normpath(module.params["path"])
    checked = preflight.nearest_existing_dir(path, os.path.isdir)
    try:
        stat = os.statvfs(checked)
    except OSError as exc:
        module.fail_json(msg="cannot read the free space of %s (for %s): %s" % (checked, path, exc))
    repo_dir = module.params["repo_dir"]
    present = hf_cache.blob_bytes(repo_dir) if repo_dir else 0
    needed = preflight.bytes_needed(module.params["size_gb"], present)
    if module.params["blobs"] is not None and repo_dir:
        present, needed = hf_cache.blobs_present(repo_dir, module.params["blobs"])
    module.exit_json(
        changed=False,
        path=path,
        exists=os.path.isdir(path),
        checked=checked,
        free_bytes=stat.f_bavail * stat.f_frsize,
        total_bytes=stat.f_blocks * stat.f_frsize,
        present_bytes=present,
        needed_bytes=needed,
    )


if __name__ == "__main__":
    main()
