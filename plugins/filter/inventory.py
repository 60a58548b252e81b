# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: inventory_problems
short_description: List what is wrong with a Spark cluster inventory
version_added: 0.1.0
description:
  - Checks the head and worker groups and every host's C(dgxspark_fabric_rails).
  - Returns one message per problem, each naming the host and the variable, what was found and what was expected.
options:
  _input:
    description: The C(groups) magic variable.
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  play_hosts:
    description: Hosts whose variables are checked (usually C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  head_group:
    description: Group of the head node.
    type: str
    default: spark_head
  worker_group:
    description: Group of the workers.
    type: str
    default: spark_workers
  fabric_prefix:
    description: Prefix length of the fabric subnets.
    type: int
    default: 24
"""

EXAMPLES = r"""
- name: Stop if the inventory is inconsistent
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' | ') }}"
  vars:
    problems: "{{ groups | dgxspark.cluster.inventory_problems(hostvars, ansible_play_hosts_all) }}"
"""

RETURN = r"""
_value:
  description: The problems, empty when the inventory is sane.
  type: list
  elements: str
"""

from ansible_collections.dgxspark.cluster.plugins.module_utils.inventory import inventory_problems


class FilterModule(object):
    """Inventory checks."""

    def filters(self):
        return {"inventory_problems": inventory_problems}
