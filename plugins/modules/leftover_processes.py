#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: leftover_processes
short_description: Find (and optionally stop) leftover vLLM, Ray and EngineCore processes and holders of the serving ports
version_added: 0.1.0
description:
  - Reads C(/proc) - every process's command line and systemd cgroup, and the listening TCP sockets
    (C(/proc/net/tcp), C(/proc/net/tcp6)) - and reports the processes whose command line matches one of
    O(patterns) or that listen on one of O(ports), unless they belong to the serving unit O(unit) (its cgroup) or
    to a container of the compose project O(compose_project).
  - With O(stop=false) (the default) it only reads. With O(stop=true) it ends each leftover the way that sticks -
    C(systemctl stop) for a system service whose main process is vLLM/Ray (a kill is raced by the unit's restart;
    an enabled unit is also disabled, so it does not come back at the next boot),
    C(docker stop) for one in a container, SIGTERM then SIGKILL for anything else - and reports what is left. A
    port holder in a system service that is not vLLM/Ray (docker-proxy, a notebook server) is never stopped, only
    reported.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: With O(stop=true) in check mode it reports changed when something would be stopped, and stops nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  unit:
    description: The serving unit; processes in its cgroup are ours, never leftovers.
    type: str
    required: true
  units:
    description: More of the collection's units whose processes are ours (the API proxy, which holds the API port).
    type: list
    elements: str
    default: []
  compose_project:
    description:
      - Compose project of the container kind; processes in its containers are ours. Empty for the venv kind.
      - Its containers are listed with C(docker ps --filter label=com.docker.compose.project=...) when docker is installed.
    type: str
    default: ""
  patterns:
    description:
      - Python regular expressions searched in each command line (argv joined with spaces). A match is a leftover
        unless it is ours.
      - When not given, the module's own list (the default of the preflight role's C(preflight_leftover_patterns))
        recognises C(vllm serve), C(python -m vllm...), vLLM's process titles (C(VLLM::EngineCore)), the Ray daemons
        and CLI, and Ray's workers (C(ray::...)).
    type: list
    elements: str
  ports:
    description: TCP ports (the API port, the rendezvous port) no other process may listen on.
    type: list
    elements: int
    default: []
  stop:
    description: Stop the leftovers (see the description), then report what is left.
    type: bool
    default: false
  stop_timeout:
    description: Seconds a leftover gets to exit after SIGTERM (and C(docker stop)'s grace time) before SIGKILL.
    type: int
    default: 60
  proc_root:
    description: Where procfs is mounted (tests point it at a copy).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Find leftover vLLM/Ray processes and holders of the serving ports
  dgxspark.cluster.leftover_processes:
    unit: dgxspark-vllm.service
    ports: [8888, 25000]
  register: leftovers
  check_mode: false

- name: Stop them
  dgxspark.cluster.leftover_processes:
    unit: dgxspark-vllm.service
    ports: [8888, 25000]
    stop: true
  when: leftovers.leftovers | length > 0
"""

RETURN = r"""
leftovers:
  description: What was found before anything was stopped, one dict per process.
  type: list
  elements: dict
  returned: always
  sample:
    - pid: 4242
      comm: vllm
      cmdline: /opt/old/bin/python3 /opt/old/bin/vllm serve deepseek-ai/DeepSeek-V4-Flash
      ports: [8888]
      matched: ^(\S*/)?python[0-9.]*\s+(\S*/)?vllm(\s|$)
      unit: old-vllm.service
      container: ""
      scope: old-vllm.service
      action: unit
summary:
  description: The leftovers as lines (pid, command name, command line, ports, unit or container).
  type: list
  elements: str
  returned: always
  sample: ["pid 4242 vllm (/opt/old/bin/python3 /opt/old/bin/vllm serve ...) holds port 8888 in old-vllm.service"]
stopped:
  description: What was stopped (or would be, in check mode), one line per action.
  type: list
  elements: str
  returned: always
  sample: ["systemctl stop old-vllm.service", "systemctl disable old-vllm.service", "SIGTERM pid 4343 (ray::IDLE)"]
remaining:
  description: Leftovers still there afterwards (the same as RV(leftovers) when O(stop=false)).
  type: list
  elements: dict
  returned: always
remaining_summary:
  description: RV(remaining) as lines.
  type: list
  elements: str
  returned: always
own_containers:
  description: Container ids of O(compose_project) (ours).
  type: list
  elements: str
  returned: always
"""

import os
import signal

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import leftovers as lo


def own_containers(module, project):
    """Full ids of the running containers of the compose project (none without docker)."""
    if not project:
        return []
    docker = module.get_bin_path("docker")
    if not docker:
        return []
    rc, out, _err = module.run_command([docker, "ps", "-q", "--no-trunc", "--filter",
                                        "label=com.docker.compose.project=%s" % project],
                                       environ_update={"LC_ALL": "C"}, check_rc=False)
    if rc != 0:
        return []  # no daemon: no container runs
    return [line.strip() for line in out.splitlines() if line.strip()]


def main_pid(module, unit):
    """MainPID of a system unit (0 when it has none or systemctl cannot tell)."""
    rc, out, _err = module.run_command(["systemctl", "show", "--property=MainPID", "--value", unit],
                                       environ_update={"LC_ALL": "C"}, check_rc=False)
    try:
        return int(out.strip()) if rc == 0 else 0
    except ValueError:
        return 0


def find(module, containers):
    params = module.params
    processes, listeners, root, listener_uids = lo.scan(params["proc_root"], params["ports"])
    exclude = lo.ancestors(params["proc_root"], os.getpid())
    patterns = params["patterns"] if params["patterns"] is not None else lo.DEFAULT_PATTERNS
    found = lo.classify(processes, listeners, patterns, unit=[params["unit"]] + params["units"], container_ids=containers,
                        root=root, exclude=exclude, listener_uids=listener_uids)
    units = sorted(set(f["unit"] for f in found if f["action"] == "unit"))
    return lo.unit_actions(found, dict((unit, main_pid(module, unit)) for unit in units))


def stop_all(module, found):
    """Stop what can be stopped; returns the actions as lines."""
    params = module.params
    actions = []
    units = sorted(set(f["unit"] for f in found if f["action"] == "unit"))
    containers = sorted(set(f["container"] for f in found if f["action"] == "container"))
    signalled = [f for f in found if f["action"] == "signal"]
    for unit in units:
        actions.append("systemctl stop %s" % unit)
        if not module.check_mode:
            rc, _out, err = module.run_command(["systemctl", "stop", unit], environ_update={"LC_ALL": "C"})
            if rc != 0:
                module.fail_json(msg="systemctl stop %s failed (%d): %s" % (unit, rc, err.strip()), stopped=actions)
        # stopped but still enabled, it starts again at the next boot beside ours
        _rc, out, _err = module.run_command(["systemctl", "is-enabled", unit], environ_update={"LC_ALL": "C"})
        if lo.unit_enabled(out):
            actions.append("systemctl disable %s" % unit)
            if not module.check_mode:
                rc, _out, err = module.run_command(["systemctl", "disable", unit], environ_update={"LC_ALL": "C"})
                if rc != 0:
                    module.fail_json(msg="systemctl disable %s failed (%d): %s" % (unit, rc, err.strip()), stopped=actions)
    docker = module.get_bin_path("docker") if containers else None
    for container in containers:
        actions.append("docker stop %s" % container[:12])
        if not module.check_mode:
            if not docker:
                module.fail_json(msg="docker is not installed, cannot stop container %s" % container, stopped=actions)
            rc, _out, err = module.run_command([docker, "stop", "--time", str(params["stop_timeout"]), container],
                                               environ_update={"LC_ALL": "C"})
            if rc != 0:
                module.fail_json(msg="docker stop %s failed (%d): %s" % (container, rc, err.strip()), stopped=actions)
    for item in signalled:
        actions.append("SIGTERM pid %d (%s)" % (item["pid"], item["comm"]))
    if module.check_mode or not actions:
        return actions
    pid_list = [f["pid"] for f in signalled]
    lo.signal_pids(pid_list, signal.SIGTERM)
    stubborn = lo.wait_gone(params["proc_root"], [f["pid"] for f in found if f["action"] != "manual"],
                            params["stop_timeout"])
    killed = [p for p in stubborn if p in pid_list]
    if killed:
        actions.extend("SIGKILL pid %d" % p for p in killed)
        lo.signal_pids(killed, signal.SIGKILL)
        lo.wait_gone(params["proc_root"], killed, 10)
    return actions


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            units=dict(type="list", elements="str", default=[]),
            compose_project=dict(type="str", default=""),
            patterns=dict(type="list", elements="str"),
            ports=dict(type="list", elements="int", default=[]),
            stop=dict(type="bool", default=False),
            stop_timeout=dict(type="int", default=60),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    containers = own_containers(module, module.params["compose_project"])
    found = find(module, containers)
    stopped = []
    remaining = found
    if module.params["stop"] and found:
        stopped = stop_all(module, found)
        if stopped and not module.check_mode:
            remaining = find(module, containers)
        elif module.check_mode:
            remaining = [f for f in found if f["action"] == "manual"]
    module.exit_json(changed=bool(stopped), leftovers=found, summary=[lo.describe(f) for f in found], stopped=stopped,
                     remaining=remaining, remaining_summary=[lo.describe(f) for f in remaining],
                     own_containers=containers)


if __name__ == "__main__":
    main()
