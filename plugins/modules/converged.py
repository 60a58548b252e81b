#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged
short_description: Record what a complete run of a role left on a node, or check in one call that it still holds
version_added: 0.1.0
description:
  - With O(state=record), reads back every resource in O(resources) (files and directory trees with their content
    hashes, packages with version and hold, units with enabled and active state, users, groups, command outputs)
    and writes it, with O(inputs), to the stamp C(<path>/<role>.json) (mode 0600). Changed only when the stamp's
    content changes.
  - With O(state=check), reads nothing from O(resources); for every role in O(roles) it loads the stamp, compares
    its inputs with O(inputs), reads back every resource the stamp lists and compares. Read-only.
  - site.yml uses this to skip a run in which nothing would change (the fast path); see docs/architecture.md.
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
    description: The directory of the stamps.
    type: path
    default: /var/lib/dgxspark/converged
  roles:
    description: The roles to check (O(state=check)), or the one role to record (O(state=record)).
    type: list
    elements: str
    required: true
  inputs:
    description:
      - The digest of everything the run was computed from (variables, topology, the collection's files).
      - Required with O(state=check) and O(state=record).
    type: str
  state:
    description:
      - V(check) compares, V(record) writes the role's stamp.
      - V(baseline) adds to C(<path>/baseline.json) what the node has now of each resource in O(resources) that the
        baseline does not hold yet (the first value of a key stays), and the resources themselves to the role's list.
        Each role calls it before its first change, so the baseline is what the node had before the collection, and
        the manifest C(dgxspark.cluster.uninstall) removes by. O(inputs) is not needed.
    type: str
    choices: [check, record, baseline]
    default: check
  resources:
    description:
      - What the role manages on this node (O(state=record) and O(state=baseline)). Keys C(paths), C(trees) (absolute paths),
        C(packages), C(units), C(users), C(groups) (names) and C(commands) (a list of C({argv, compare}),
        C(compare) being V(stdout) or V(rc)).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Check every role's stamp in one call
  dgxspark.cluster.converged:
    roles: [nic, driver]
    inputs: "{{ preflight_site_inputs }}"
  register: stamps

- name: Record what the driver role left
  dgxspark.cluster.converged:
    roles: [driver]
    inputs: "{{ preflight_site_inputs }}"
    state: record
    resources:
      paths: [/etc/apt/preferences.d/nvidia-driver-580]
      packages: [nvidia-driver-580-open]
      commands:
        - argv: [nvidia-smi, --query-gpu=driver_version, "--format=csv,noheader"]
          compare: stdout
"""

RETURN = r"""
converged:
  description: Whether every role's stamp matched (O(state=check)); whether the stamp now matches (O(state=record)).
  type: bool
  returned: always
drift:
  description: What differs, one line per difference, prefixed with the role (empty when converged).
  type: list
  elements: str
  returned: always
  sample: ["driver: package:nvidia-driver-580-open: was 580.173.02-1 hold ok installed, now absent"]
stamp:
  description: The stamp file written (O(state=record)).
  type: str
  returned: when state is record
baseline:
  description: The baseline file (O(state=baseline)).
  type: str
  returned: when state is baseline
added:
  description: The keys this call added to the baseline (O(state=baseline)); empty once the node was read before.
  type: list
  elements: str
  returned: when state is baseline
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.converged import (
    BASELINE_NAME,
    BASELINE_VERSION,
    ConvergedError,
    check_stamp,
    dump_stamp,
    load_stamp,
    make_stamp,
    read_path,
    snapshot,
    stamp_path,
    update_baseline,
)


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/dgxspark/converged"),
            roles=dict(type="list", elements="str", required=True),
            inputs=dict(type="str"),
            state=dict(type="str", choices=["check", "record", "baseline"], default="check"),
            resources=dict(type="dict", default={}),
        ),
        required_if=[("state", "check", ["inputs"]), ("state", "record", ["inputs"])],
        supports_check_mode=True,
    )
    params = module.params
    env = dict(LANG="C", LC_ALL="C")

    def run(argv):
        return module.run_command(argv, environ_update=env, handle_exceptions=False)

    if params["state"] == "check":
        drift = []
        for role in params["roles"]:
            _ok, reasons = check_stamp(load_stamp(stamp_path(params["path"], role)), role, params["inputs"], run)
            drift.extend(reasons)
        module.exit_json(changed=False, converged=not drift, drift=drift)

    if params["state"] == "baseline":
        record_baseline(module, run)

    if len(params["roles"]) != 1:
        module.fail_json(msg="converged: state=record records one role at a time, got roles=%s" % params["roles"])
    role = params["roles"][0]
    try:
        stamp = make_stamp(role, params["inputs"], params["resources"], snapshot(params["resources"], run))
    except ConvergedError as exc:
        module.fail_json(msg="converged: role %s: %s" % (role, exc))
    target = stamp_path(params["path"], role)
    changed = write_if_changed(module, params["path"], target, dump_stamp(stamp), role)
    module.exit_json(changed=changed, converged=True, drift=[], stamp=target)


def read_text(module, target):
    try:
        with open(target, "r", encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg="converged: cannot read %s: %s" % (target, exc.strerror))


def write_if_changed(module, directory, target, text, prefix):
    """Write text to target (root 0600, atomically, the directory 0700) unless it holds it; whether it changed."""
    changed = read_text(module, target) != text
    if changed and not module.check_mode:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % prefix)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except OSError as exc:
            module.fail_json(msg="converged: cannot write %s: %s" % (target, exc.strerror))
    return changed


def record_baseline(module, run):
    """state=baseline: add what the node has now to baseline.json, for every key it does not hold yet."""
    params = module.params
    if len(params["roles"]) != 1:
        module.fail_json(msg="converged: state=baseline records one role at a time, got roles=%s" % params["roles"])
    target = os.path.join(params["path"], BASELINE_NAME)
    text = read_text(module, target)
    try:
        old = json.loads(text) if text else None
    except ValueError:
        module.fail_json(msg="converged: %s is not JSON; move it aside (it is what the node had before the collection, "
                             "the uninstall manifest)" % target)
    if old is None:
        # the first baseline of the node: whether the state directories were there before the collection made them
        parent = os.path.dirname(params["path"].rstrip("/"))
        old = {"version": BASELINE_VERSION, "packages": None, "roles": {"converged": {"paths": [parent, params["path"]]}},
               "resources": {"path:" + parent: read_path(parent), "path:" + params["path"]: read_path(params["path"])}}
    try:
        baseline, added = update_baseline(old, params["roles"][0], params["resources"], run)
    except ConvergedError as exc:
        module.fail_json(msg="converged: role %s: %s" % (params["roles"][0], exc))
    changed = write_if_changed(module, params["path"], target, json.dumps(baseline, sort_keys=True, indent=1) + "\n",
                               "baseline")
    module.exit_json(changed=changed, converged=True, drift=[], baseline=target, added=added)


def main():
    run_module()


if __name__ == "__main__":
    main()
