#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: uninstall
short_description: Remove from a node exactly what dgxspark.cluster installed, and put back what it changed
version_added: 0.1.0
description:
  - Reads the baseline C(<path>/baseline.json) the roles wrote before their first change (module
    M(dgxspark.cluster.converged), O(dgxspark.cluster.converged#module:state=baseline)), that is every resource each
    role manages and what the node had of it before the collection.
  - Stops and disables the units the collection made, removes the images it pulled, the files, links and
    directories it created (a directory with everything in it, through descriptors, never following a link), the
    users and groups it created; purges the packages it installed and what their install pulled in (apt's autoremove
    list less every package installed before); releases the holds it set; puts back the unit-file and active state of
    the units it changed (earlyoom); last, removes its state directory.
  - Keeps the driver's and CUDA's packages unless O(packages), the checkpoint's trees (and the user and group that
    own them, and the directories that hold them) unless O(checkpoint). A path that was there before and differs now
    is left and named.
  - In check mode, answers what would be done and changes nothing. A node without a baseline answers that nothing
    is recorded and changes nothing.
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
  node:
    description: The node's name, as the report names it.
    type: str
    required: true
  path:
    description: The directory of the stamps and the baseline.
    type: path
    default: /var/lib/dgxspark/converged
  packages:
    description: Purge the driver's and CUDA's packages too, when the collection installed them.
    type: bool
    default: false
  checkpoint:
    description: Remove the checkpoint (its trees, the user and group that own them) too, when the collection made it.
    type: bool
    default: false
notes:
  - A node converged by a version of the collection without the baseline has its first baseline taken after the
    fact; what was there then counts as the node's own and stays.
seealso:
  - module: dgxspark.cluster.converged
"""

EXAMPLES = r"""
- name: Remove what the collection installed (check mode lists it)
  dgxspark.cluster.uninstall:
    node: "{{ inventory_hostname }}"
    packages: false
    checkpoint: false
  register: uninstall
"""

RETURN = r"""
recorded:
  description: Whether the node had a baseline.
  type: bool
  returned: always
stop_units:
  description: Units the collection made, stopped and disabled.
  type: list
  elements: str
  returned: always
restore_units:
  description: Units the collection changed, put back (unit, unit_file_state, active, was, now).
  type: list
  elements: dict
  returned: always
remove_paths:
  description: Files, links and directories removed, deepest first.
  type: list
  elements: str
  returned: always
remove_users:
  description: Users removed.
  type: list
  elements: str
  returned: always
remove_groups:
  description: Groups removed.
  type: list
  elements: str
  returned: always
purge:
  description: Packages the collection installed, purged.
  type: list
  elements: str
  returned: always
autoremove:
  description: Packages their install pulled in (not installed before), purged.
  type: list
  elements: str
  returned: always
unhold:
  description: Packages whose hold was released.
  type: list
  elements: str
  returned: always
remove_images:
  description: Container images removed.
  type: list
  elements: str
  returned: always
kept:
  description: What stays, and why (item, why).
  type: list
  elements: dict
  returned: always
left:
  description: What was there before and differs now, left as it is (item, why).
  type: list
  elements: dict
  returned: always
report:
  description: One line per kind, naming the node.
  type: list
  elements: str
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.converged import (
    BASELINE_NAME,
    DPKG_ALL,
    parse_dpkg_query,
    read_group,
    snapshot,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils.safe_dirs import UnsafePath, remove
from ansible_collections.dgxspark.cluster.plugins.module_utils.uninstall import (
    parse_autoremove,
    plan,
    read_spec,
    shape_problem,
    summary,
)

APT_ENV = dict(LANG="C", LC_ALL="C", DEBIAN_FRONTEND="noninteractive")


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            path=dict(type="path", default="/var/lib/dgxspark/converged"),
            packages=dict(type="bool", default=False),
            checkpoint=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    node, check = p["node"], module.check_mode

    def run(argv, what=None):
        rc, out, err = module.run_command(argv, environ_update=APT_ENV)
        if what is not None and rc != 0:
            module.fail_json(msg="%s: %s failed (rc %d): %s; what ran before it is done, run uninstall.yml again when "
                                 "fixed" % (node, what, rc, (err or out).strip()[-400:]), **done)
        return rc, out, err

    done = dict(recorded=False, stop_units=[], restore_units=[], remove_paths=[], remove_users=[], remove_groups=[],
                purge=[], autoremove=[], unhold=[], remove_images=[], kept=[], left=[])
    target = os.path.join(p["path"], BASELINE_NAME)
    try:
        with open(target, "r", encoding="utf-8") as handle:
            baseline = json.load(handle)
    except FileNotFoundError:
        module.exit_json(changed=False, report=["%s: no baseline in %s: nothing the collection installed is recorded "
                                                "on this node" % (node, p["path"])], **done)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="%s: cannot read the baseline %s (%s); nothing was changed" % (node, target, exc), **done)

    problem = shape_problem(baseline)
    if problem:
        module.fail_json(msg="%s: the baseline %s is unreadable (%s); nothing was changed" % (node, target, problem),
                         **done)
    current = snapshot(read_spec(baseline), lambda argv: module.run_command(argv, environ_update=APT_ENV))
    _rc, out, _err = run(DPKG_ALL)
    installed = {k: v for k, v in parse_dpkg_query(out).items() if v.endswith(" ok installed")}
    steps = plan(baseline, current, installed, packages=p["packages"], checkpoint=p["checkpoint"])
    done.update(steps, recorded=True)
    state_dirs = list(((baseline.get("roles") or {}).get("converged") or {}).get("paths") or [])
    done["remove_paths"] = [x for x in done["remove_paths"] if x not in state_dirs]
    removable_state = [d for d in sorted(state_dirs, key=lambda d: -d.count("/"))
                       if (baseline.get("resources") or {}).get("path:" + d) == "absent"]
    changed = any(done[k] for k in ("stop_units", "restore_units", "remove_paths", "remove_users", "remove_groups",
                                    "purge", "unhold", "remove_images")) or bool(removable_state)

    if done["purge"]:
        # what purging them would take along (apt's --auto-remove), less every package the node had before
        _rc, sim, _err = run(["apt-get", "-s", "--auto-remove", "purge", "--"] + done["purge"],
                             "simulating the purge of " + ", ".join(done["purge"]))
        done["autoremove"] = [n for n in parse_autoremove(sim)
                              if n not in done["purge"] and n not in (baseline.get("packages") or {})]
    if check:
        module.exit_json(changed=changed, report=summary(node, done, True), **done)

    for ref in done["remove_images"]:
        run(["docker", "image", "rm", "--", ref], "removing the image %s" % ref)
    for unit in done["stop_units"]:
        run(["systemctl", "disable", "--now", "--", unit])     # a unit already gone answers non-zero: nothing to stop
    for path in done["remove_paths"]:
        try:
            remove(path)
        except (UnsafePath, OSError) as exc:
            module.fail_json(msg="%s: cannot remove %s: %s; what ran before it is done" % (node, path, exc), **done)
    if done["stop_units"] or done["remove_paths"]:
        run(["systemctl", "daemon-reload"], "systemctl daemon-reload")
    for name in done["remove_users"]:
        run(["userdel", "--", name], "removing the user %s" % name)
    for name in done["remove_groups"]:
        if read_group(name) != "absent":            # userdel may have taken the user's own group along
            run(["groupdel", "--", name], "removing the group %s" % name)
    if done["unhold"]:
        run(["apt-mark", "unhold", "--"] + done["unhold"], "releasing the holds")
    if done["purge"]:
        run(["apt-get", "purge", "-y", "-q", "--"] + done["purge"] + done["autoremove"],
            "purging " + ", ".join(done["purge"] + done["autoremove"]))
    for item in done["restore_units"]:
        unit = item["unit"]
        run(["systemctl", "unmask", "--", unit], "unmasking %s" % unit)
        if item["unit_file_state"] == "enabled":
            run(["systemctl", "enable", "--", unit], "enabling %s" % unit)
        elif item["unit_file_state"] == "disabled":
            run(["systemctl", "disable", "--", unit], "disabling %s" % unit)
        elif item["unit_file_state"] == "masked":
            run(["systemctl", "mask", "--", unit], "masking %s" % unit)
        if item["active"]:
            run(["systemctl", "start", "--", unit], "starting %s" % unit)
        elif item["now"].endswith(" active"):
            run(["systemctl", "stop", "--", unit], "stopping %s" % unit)
    for directory in removable_state:
        try:
            if directory == p["path"]:
                remove(directory)
            elif remove(directory, only_empty=True) == "not empty":
                done["kept"].append({"item": directory, "why": "not empty: holds what is kept"})
                continue
        except (UnsafePath, OSError) as exc:
            module.fail_json(msg="%s: cannot remove %s: %s" % (node, directory, exc), **done)
        done["remove_paths"].append(directory)
    module.exit_json(changed=changed, report=summary(node, done, False), **done)


def main():
    run_module()


if __name__ == "__main__":
    main()
