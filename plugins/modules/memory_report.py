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
"""

RETURN = r"""
ok:
  description: C(MemAvailable) >= O(minimum_mb).
  type: bool
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

from ansible_collections.dgxspark.cluster.plugins.module_utils import memory


def main():
    module = AnsibleModule(
        argument_spec=dict(minimum_mb=dict(type="int", default=0), processes=dict(type="int", default=5)),
        supports_check_mode=True,
    )
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as handle:
            info = memory.meminfo(handle.read())
    except OSError as error:
        module.fail_json(msg="cannot read /proc/meminfo: %s" % error)
    largest = memory.largest_processes(count=module.params["processes"])
    minimum = module.params["minimum_mb"]
    available_mb = info.get("MemAvailable", 0) // 1024
    module.exit_json(changed=False, ok=available_mb >= minimum, meminfo=info, available_mb=available_mb,
                     largest=largest, msg=memory.report(info, largest, minimum))


if __name__ == "__main__":
    main()
