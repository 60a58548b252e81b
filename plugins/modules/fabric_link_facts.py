#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fabric_link_facts
short_description: Report the link health of each fabric rail (ibdev2netdev, ibstat, ethtool, MTU)
version_added: 0.1.0
description:
  - For each rail, finds the RDMA device behind the netdev with C(ibdev2netdev), reads the port state,
    physical state, rate and link layer with C(ibstat), the negotiated speed with C(ethtool) and the MTU
    from sysfs, and lists what is wrong.
  - A link that passes every check can still be stale-initialised (about 13 Gb/s whatever the load);
    only a bandwidth test shows that (M(dgxspark.cluster.ib_write_bw)).
  - Read-only; runs in check mode.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
options:
  rails:
    description: The host's fabric rails, as in C(dgxspark_fabric_rails).
    type: list
    elements: dict
    required: true
  mtu:
    description: The MTU each rail netdev must have. C(0) skips the check.
    type: int
    default: 9000
  min_speed_mbps:
    description: The least negotiated Ethernet speed (ethtool) a rail may report. C(0) skips the check.
    type: int
    default: 200000
  sysfs_root:
    description: Where sysfs is mounted (the netdev MTU is read from C(<sysfs_root>/class/net/<netdev>/mtu)).
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
  - Needs C(ibdev2netdev) (mlnx-tools), C(ibstat) (infiniband-diags) and C(ethtool) on the node.
"""

EXAMPLES = r"""
- name: Read the link state of the fabric rails
  dgxspark.cluster.fabric_link_facts:
    rails: "{{ dgxspark_fabric_rails }}"
    mtu: 9000
"""

RETURN = r"""
ansible_facts:
  description: Facts set for the host.
  returned: always
  type: dict
  contains:
    fabric_links:
      description: One entry per rail, in the order given.
      type: list
      elements: dict
      sample:
        - netdev: enp1s0f1np1
          ipv4: 192.168.100.1
          device: rocep1s0f1
          port: 1
          carrier: Up
          state: Active
          physical_state: LinkUp
          rate: 200
          link_layer: Ethernet
          mtu: 9000
          speed_mbps: 200000
          problems: []
problems:
  description: Everything wrong with the rails, one message each (empty when healthy).
  returned: always
  type: list
  elements: str
healthy:
  description: True when no rail has a problem.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.ibtools import (
    parse_ethtool,
    parse_ibdev2netdev,
    parse_ibstat,
    rail_link_status,
)


def _run(module, tool, args):
    path = module.get_bin_path(tool)
    if not path:
        return None, "%s is not installed" % tool
    rc, out, err = module.run_command([path] + args, environ_update={"LC_ALL": "C"})
    if rc != 0 and not out:
        return out, "%s %s exited %d: %s" % (tool, " ".join(args), rc, (err or "").strip())
    return out + "\n" + (err or ""), None


def _read_mtu(sysfs_root, netdev):
    try:
        with open(os.path.join(sysfs_root, "class", "net", netdev, "mtu")) as handle:
            return int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rails=dict(type="list", elements="dict", required=True),
            mtu=dict(type="int", default=9000),
            min_speed_mbps=dict(type="int", default=200000),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    rails = module.params["rails"]
    for idx, rail in enumerate(rails):
        if not rail.get("netdev"):
            module.fail_json(msg="rails[%d] has no netdev: %r (expected {netdev, ipv4})" % (idx, rail))
    ibdev_out, err = _run(module, "ibdev2netdev", [])
    if err:
        module.fail_json(msg="cannot list the RDMA netdevs: %s (apt-get install mlnx-tools or ibverbs-utils)" % err)
    ibstat_out, err = _run(module, "ibstat", [])
    if err and ibstat_out is None:
        module.fail_json(msg="cannot read the RDMA ports: %s (apt-get install infiniband-diags)" % err)
    rows = parse_ibdev2netdev(ibdev_out)
    ibstat = parse_ibstat(ibstat_out or "")
    links = []
    problems = []
    for rail in rails:
        netdev = rail["netdev"]
        eth_out, eth_err = _run(module, "ethtool", [netdev])
        speed = parse_ethtool(eth_out or "")["speed_mbps"] if not eth_err else None
        status = rail_link_status(rail, rows, ibstat, mtu=_read_mtu(module.params["sysfs_root"], netdev), speed_mbps=speed)
        want_mtu = module.params["mtu"]
        if want_mtu and status["mtu"] != want_mtu:
            status["problems"].append("%s has MTU %s, expected %d (a firmware reboot can reset it to 1500)"
                                      % (netdev, status["mtu"], want_mtu))
        want_speed = module.params["min_speed_mbps"]
        if want_speed and status["carrier"] == "Up" and (speed is None or speed < want_speed):
            status["problems"].append("%s negotiated %s Mb/s (ethtool%s), expected at least %d Mb/s"
                                      % (netdev, speed, ": " + eth_err if eth_err else "", want_speed))
        links.append(status)
        problems.extend(status["problems"])
    module.exit_json(changed=False, ansible_facts={"fabric_links": links}, problems=problems, healthy=not problems)


if __name__ == "__main__":
    main()
