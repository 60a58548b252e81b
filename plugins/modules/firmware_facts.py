#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: firmware_facts
short_description: Read the node's system firmware from the EFI System Resource Table (what fwupd updates)
version_added: 0.1.0
description:
  - Reads every entry of the ESRT the kernel exports under C(<sysfs_root>/firmware/efi/esrt/entries/) (firmware
    class, type, version, lowest supported version, capsule flags, last attempted version and status), the table
    fwupd's UEFI capsule plugin reads. The files are readable by root only.
  - Reports an entry whose last capsule update did not succeed (C(last_attempt_status) not 0).
  - Read-only; runs in check mode. The collection reports firmware and never updates it.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
options:
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
attributes:
  check_mode:
    support: full
    description: Read-only; runs and reports the same in check mode.
  diff_mode:
    support: none
    description: Nothing to diff.
notes:
  - A node that booted without UEFI, or a kernel without ESRT support, exports no table; I(esrt) is then null.
"""

EXAMPLES = r"""
- name: Read the system firmware
  dgxspark.cluster.firmware_facts:
  become: true
  register: firmware
"""

RETURN = r"""
esrt:
  description: The ESRT entries in entry order (null when the kernel exports no ESRT).
  returned: always
  type: list
  elements: dict
  sample:
    - entry: entry0
      fw_class: 6dcbd5ed-e82d-4c44-bda1-7194199ad92a
      fw_type: 1
      fw_version: 65539
      lowest_supported_fw_version: 65536
      capsule_flags: 32784
      last_attempt_version: 65539
      last_attempt_status: 0
summary:
  description: Firmware class -> its type and version (null without an ESRT).
  returned: always
  type: dict
failed_updates:
  description: One line per entry whose last capsule update did not apply.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.firmware import failed_attempts, read_esrt, summary


def main():
    module = AnsibleModule(argument_spec=dict(sysfs_root=dict(type="path", default="/sys")), supports_check_mode=True)
    try:
        entries = read_esrt(module.params["sysfs_root"])
    except OSError as exc:
        module.fail_json(msg="cannot read the ESRT under %s/firmware/efi/esrt: %s (the files are root-only: become)"
                         % (module.params["sysfs_root"], exc))
    module.exit_json(changed=False, esrt=entries, summary=summary(entries),
                     failed_updates=failed_attempts(None, entries))


if __name__ == "__main__":
    main()
