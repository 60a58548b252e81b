#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: safe_directories
short_description: Create or fix directories as root without following a link another user could plant
version_added: 0.1.0
description:
  - For each entry of O(directories), makes the path a directory with the given owner, group and mode, working on
    file descriptors (C(openat), C(mkdirat), C(O_NOFOLLOW), C(fchown), C(fchmod)) so that no check-then-act window
    lets the owner of a parent directory swap the entry for a symbolic link and have root act on its target.
  - The path is walked from C(/); a link is followed only where it sits in a directory that root owns and no one else
    can write. A link anywhere else, or in place of the directory itself, fails naming the path, and nothing after it
    is touched.
  - An entry with O(directories[].parent) is only created when missing; an existing one keeps its owner and mode.
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
  directories:
    description: The directories, in order (a parent before what it holds).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute, normalised path.
        type: str
        required: true
      owner:
        description: Owner (a user name).
        type: str
        required: true
      group:
        description: Group (a group name); the owner's name when omitted.
        type: str
      mode:
        description: Octal mode, for example C("0750").
        type: str
        required: true
      parent:
        description: Create only when missing; never change an existing one.
        type: bool
        default: false
"""

EXAMPLES = r"""
- name: Create the checkpoint user's home and its .ssh (the user owns the home; a link there is refused)
  dgxspark.cluster.safe_directories:
    directories:
      - {path: /var/lib/dgxspark, owner: root, mode: "0755", parent: true}
      - {path: /var/lib/dgxspark/checkpoint, owner: dgxspark-ckpt, mode: "0750"}
      - {path: /var/lib/dgxspark/checkpoint/.ssh, owner: dgxspark-ckpt, mode: "0700"}
"""

RETURN = r"""
created:
  description: The paths made (or, in check mode, that would be made).
  type: list
  elements: str
  returned: always
fixed:
  description: The existing paths whose owner, group or mode was (or would be) changed.
  type: list
  elements: str
  returned: always
"""

import grp
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import safe_dirs


def _ids(module, entry):
    group = entry["group"] or entry["owner"]
    # In check mode the user an earlier task would create may not exist yet: the directory then counts as to be
    # made or fixed (an id no file has), never as a failure.
    try:
        uid = pwd.getpwnam(entry["owner"]).pw_uid
    except KeyError:
        if not module.check_mode:
            module.fail_json(msg="%s: no user %s on this node" % (entry["path"], entry["owner"]))
        uid = -2
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        if not module.check_mode:
            module.fail_json(msg="%s: no group %s on this node" % (entry["path"], group))
        gid = -2
    try:
        mode = int(entry["mode"], 8)
    except ValueError:
        module.fail_json(msg="%s: mode %r is not octal" % (entry["path"], entry["mode"]))
    return uid, gid, mode


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", required=True, options=dict(
                path=dict(type="str", required=True),
                owner=dict(type="str", required=True),
                group=dict(type="str"),
                mode=dict(type="str", required=True),
                parent=dict(type="bool", default=False),
            )),
        ),
        supports_check_mode=True,
    )
    created, fixed = [], []
    for entry in module.params["directories"]:
        uid, gid, mode = _ids(module, entry)
        try:
            done = safe_dirs.ensure(entry["path"], uid, gid, mode, parent=entry["parent"], check=module.check_mode)
        except safe_dirs.UnsafePath as exc:
            module.fail_json(msg=str(exc), created=created, fixed=fixed, changed=bool(created or fixed))
        except OSError as exc:
            module.fail_json(msg="%s: %s" % (entry["path"], exc), created=created, fixed=fixed,
                             changed=bool(created or fixed))
        if done == "created":
            created.append(entry["path"])
        elif done == "fixed":
            fixed.append(entry["path"])
    module.exit_json(changed=bool(created or fixed), created=created, fixed=fixed)


if __name__ == "__main__":
    main()
