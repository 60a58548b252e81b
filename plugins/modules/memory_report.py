#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_report
short_description: What a node's memory holds (MemAvailable, the page cache, the largest processes)
version_added: 0.2.0
description:
  - Reads C(/proc/meminfo) and every process's resident set (C(/proc/<pid>/statm)), and reports whether
    C(MemAvailable) reaches O(minimum_mb), with one line naming the figures, the page cache and the largest
    processes. Reads only; the caller decides (asserts C(ok)).
  - With O(unit), the check is made only while that unit does not run (C(systemctl show -p ActiveState)); while it
    runs, vLLM itself holds the memory, and a unit is never stopped for the check. When it is not made, C(ok) is true
    and C(checked) false, with the reason.
  - With O(resident_paths), also reports how many bytes of those files (a directory is walked, links are not
    followed) are in the page cache now, measured with C(mincore(2)) (what C(fincore) reports); not while O(unit)
    runs.
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
  minimum_mb:
    description: MiB C(MemAvailable) must reach (0 = no minimum).
    type: int
    default: 0
  processes:
    description: How many of the largest processes to name.
    type: int
    default: 5
  unit:
    description: The serving unit; while it runs (active, activating, reloading, deactivating) no check is made.
    type: str
    default: ""
  resident_paths:
    description: Files or directories whose bytes in the page cache are measured (and named in C(msg)).
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Read what holds the memory
  dgxspark.cluster.memory_report:
    minimum_mb: 119808
  register: memory

- name: Stop unless vLLM gets ~117 GiB
  ansible.builtin.assert:
    that: memory.ok
    fail_msg: "{{ inventory_hostname }}: {{ memory.msg }}"

- name: Check before the serving unit starts (no check while it runs), naming the checkpoint's resident pages
  dgxspark.cluster.memory_report:
    minimum_mb: 119808
    unit: dgxspark-vllm.service
    resident_paths: [/var/lib/dgxspark/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/blobs]
  register: memory
"""

RETURN = r"""
ok:
  description: C(MemAvailable) >= O(minimum_mb), or no check was made (C(checked) false).
  type: bool
  returned: always
checked:
  description: The check was made (O(minimum_mb) above 0 and O(unit) not running).
  type: bool
  returned: always
reason:
  description: Why no check was made (empty when it was).
  type: str
  returned: always
unit_state:
  description: The ActiveState of O(unit) (empty without O(unit); C(inactive) for an unknown unit).
  type: str
  returned: always
resident_bytes:
  description: Bytes of the O(resident_paths) files in the page cache now (0, not measured, while O(unit) runs).
  type: int
  returned: always
resident_files:
  description: How many files of O(resident_paths) were measured.
  type: int
  returned: always
meminfo:
  description: C(/proc/meminfo) as {key, kB}.
  type: dict
  returned: always
available_mb:
  description: C(MemAvailable) in MiB.
  type: int
  returned: always
largest:
  description: The largest processes, C({pid, rss_kb, command}), largest first.
  type: list
  elements: dict
  returned: always
msg:
  description: The figures and what holds the memory, as one line.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import hf_cache, memory


def main():
    module = AnsibleModule(
        argument_spec=dict(minimum_mb=dict(type="int", default=0), processes=dict(type="int", default=5),
                           unit=dict(type="str", default=""),
                           resident_paths=dict(type="list", elements="path", default=[])),
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    unit_state = None
    if unit:
        rc, out, err = module.run_command(["systemctl", "show", "--property=ActiveState", "--value", unit])
        if rc != 0:
            module.fail_json(msg="cannot read the state of %s: %s" % (unit, (err or out).strip()))
        unit_state = out.strip() or "inactive"
    minimum = module.params["minimum_mb"]
    check, reason = memory.decide(minimum, unit_state, unit)
    # not while the unit runs: the figures are for a start, and walking the blobs then is work for nothing
    measured = bool(module.params["resident_paths"]) and unit_state not in memory.RUNNING_STATES
    files = memory.files_under(module.params["resident_paths"]) if measured else []
    resident = sum(hf_cache.resident_bytes(path) for path in files)
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as handle:
            info = memory.meminfo(handle.read())
    except OSError as error:
        module.fail_json(msg="cannot read /proc/meminfo: %s" % error)
    largest = memory.largest_processes(count=module.params["processes"])
    available_mb = info.get("MemAvailable", 0) // 1024
    msg = memory.report(info, largest, minimum, resident if measured else None)
    module.exit_json(changed=False, ok=(available_mb >= minimum) if check else True, checked=check, reason=reason,
                     unit_state=unit_state or "", meminfo=info, available_mb=available_mb, largest=largest,
                     resident_bytes=resident, resident_files=len(files),
                     msg=msg if check or not reason else "%s (not checked: %s)" % (msg, reason))


if __name__ == "__main__":
    main()
