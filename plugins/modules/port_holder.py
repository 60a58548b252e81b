#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_holder
short_description: Wait until a unit's main process itself holds every listening socket on a TCP port
version_added: 0.1.0
description:
  - For a server the collection starts on an unprivileged port (any local user may bind such a port first and
    receive what the clients send there). Reads the unit's C(MainPID) (C(systemctl show)) and C(/proc) (the
    listening sockets in C(/proc/net/tcp) and C(/proc/net/tcp6), every process's file descriptors), with the
    same parsers as the leftover check (plugins/module_utils/leftovers.py C(listener_check)).
  - Succeeds once the unit's main process holds every C(LISTEN) socket on O(port). Fails at once, naming each
    holder (pid, uid, command line), when another process holds one; fails when nothing listens after
    O(timeout) seconds or the unit stopped meanwhile. Only reads.
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
  unit:
    description: The unit whose main process must hold the port (C(name.service)).
    type: str
    required: true
  port:
    description: The TCP port.
    type: int
    required: true
  timeout:
    description: Seconds to wait for a listener to appear.
    type: int
    default: 30
  proc_root:
    description: Where procfs is mounted (tests point it at a copy).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Wait until the rsync daemon unit itself listens on the sync port
  dgxspark.cluster.port_holder:
    unit: dgxspark-checkpoint-rsyncd.service
    port: 8873
"""

RETURN = r"""
pid:
  description: The unit's main process, which holds the port.
  type: int
  returned: success
  sample: 4242
msg:
  description: Who holds the port (on failure, each other holder and the unit's state).
  type: str
  returned: always
  sample: port 8873 is held by dgxspark-checkpoint-rsyncd.service (MainPID 4242, active)
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import leftovers as lo

POLL = 0.5


def unit_state(module, unit):
    """``(MainPID, ActiveState)`` of ``unit`` (0 and the state when it runs nothing)."""
    _rc, out, _err = module.run_command(["systemctl", "show", "--property=MainPID", "--property=ActiveState", unit],
                                        environ_update={"LC_ALL": "C"}, check_rc=False)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        pid = int(props.get("MainPID", "0"))
    except ValueError:
        pid = 0
    return pid, props.get("ActiveState", "unknown")


def wait_holder(module, unit, port, timeout, proc_root, clock=time.monotonic, sleep=time.sleep):
    """``(status, pid, message)``: ``ok`` when ``unit``'s MainPID holds every LISTEN socket on ``port``."""
    deadline = clock() + timeout
    while True:
        pid, state = unit_state(module, unit)
        status, reason = lo.listener_check(proc_root, port, pid)
        owner = "%s (MainPID %d, %s)" % (unit, pid, state)
        if status == "ok":
            return "ok", pid, "port %d is held by %s" % (port, owner)
        if status == "other":
            return "other", pid, "%s; expected %s to hold it" % (reason, owner)
        if state not in ("active", "activating", "reloading") or clock() >= deadline:
            return "none", pid, "%s after %ds; expected %s to hold it" % (reason, timeout, owner)
        sleep(POLL)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            port=dict(type="int", required=True),
            timeout=dict(type="int", default=30),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    status, pid, message = wait_holder(module, params["unit"], params["port"], params["timeout"], params["proc_root"])
    if status != "ok":
        module.fail_json(msg=message, status=status)
    module.exit_json(changed=False, pid=pid, msg=message, status=status)


if __name__ == "__main__":
    main()
