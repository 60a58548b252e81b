# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: checkpoint_lookalikes
short_description: Say why a hub manifest is not the pinned checkpoint (lookalikes, revision, date, README)
version_added: 0.1.0
description:
  - Checks what the hub lists for a revision (the checkpoint role's manifest) before anything is downloaded.
  - Returns one line per reason; empty when the manifest is the pinned checkpoint.
  - Lookalikes share the architecture and the shard count; the repo id, the revision, the commit date and the
    README tell them apart.
options:
  _input:
    description: The manifest, C({repo_id, revision, last_modified, readme_head, files}).
    type: dict
    required: true
  repo_id:
    description: The repo the role was asked for.
    type: str
    required: true
  revision:
    description: The pinned commit.
    type: str
    required: true
  lookalikes:
    description: Known lookalikes, each C({name, repo_id, revision, date, readme_marker}).
    type: list
    elements: dict
    default: []
  min_commit_date:
    description: The commit must not be older than this date (C(YYYY-MM-DD)).
    type: str
"""

EXAMPLES = r"""
- name: Stop before downloading a lookalike
  ansible.builtin.assert:
    that: reasons | length == 0
    fail_msg: "{{ reasons | join(' | ') }}"
  vars:
    reasons: "{{ manifest | dgxspark.cluster.checkpoint_lookalikes(checkpoint_repo_id, checkpoint_revision,
                 checkpoint_lookalikes, checkpoint_min_commit_date) }}"
"""

RETURN = r"""
_value:
  description: The reasons, empty when the manifest is the pinned checkpoint.
  type: list
  elements: str
"""

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

hf_cache = deferred.Module('hf_cache')


def checkpoint_lookalikes(manifest, repo_id, revision, lookalikes=None, min_commit_date=None):
    """Reasons (strings) why ``manifest`` is not ``repo_id`` at ``revision``."""
    found = hf_cache.manifest_problems(manifest, repo_id, revision)
    found += hf_cache.lookalike_problems(repo_id, (manifest or {}).get("revision"), revision,
                                         (manifest or {}).get("last_modified"), (manifest or {}).get("readme_head"),
                                         lookalikes or [], min_commit_date or None)
    return ["%s%s" % (p["detail"], (" (%s)" % p["path"]) if p["path"] else "") for p in found]


class FilterModule(object):
    """Checkpoint checks."""

    def filters(self):
        return {"checkpoint_lookalikes": checkpoint_lookalikes}
