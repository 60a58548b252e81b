#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fabric_link_facts
short_description: Report the link health of each fabric rail (ibdev2netdev, ibstat, ethtool, MTU, PCIe link)
version_added: 0.1.0
description:
  - For each rail, finds the RDMA device behind the netdev with C(ibdev2netdev), reads the port state,
    physical state, rate and link layer with C(ibstat), the negotiated speed with C(ethtool) and the MTU
    from sysfs, and lists what is wrong.
  - Reads the PCIe link of each rail's PCI function (C(current_link_speed), C(current_link_width) under
    C(<pcie_sysfs_root>/class/net/<netdev>/device/)); a healthy Spark twin is 32.0 GT/s x4. x2 is the early GX10
    BIOS wiring of the second controller, reported as a warning that says so, not as a problem.
  - A probe tool that exits non-zero or reports an error (ibstat's C(ibpanic)) is a problem of the rails it
    concerns even when it printed some output (a panic naming a device fails that device's rail, any other every rail).
  - Reports the mlx5 "Detected insufficient power on the PCIe slot (27W)" kernel lines (C(journalctl -k -b))
    keyed by PCI address, as information only (the line prints on healthy Sparks too).
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
  pcie_sysfs_root:
    description: Where the rails' PCI functions are read (C(<pcie_sysfs_root>/class/net/<netdev>/device/current_link_*)).
    type: path
    default: /sys
  pcie_check:
    description: Check the PCIe link speed and width of each rail's PCI function.
    type: bool
    default: true
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
warnings_list:
  description: Warnings (a PCIe x2 link of the early GX10 BIOS), also emitted as module warnings.
  returned: always
  type: list
  elements: str
slot_power:
  description: The mlx5 "insufficient power on the PCIe slot" kernel lines of this boot, PCI address -> watts (information only).
  returned: always
  type: dict
  sample: {"0000:01:00.0": "27W"}
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
          pci: "0000:01:00.1"
          pcie_link_speed: 32.0 GT/s PCIe
          pcie_link_width: "4"
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
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric_health import pcie_link_check, slot_power_lines
from ansible_collections.dgxspark.cluster.plugins.module_utils.ibtools import (
    parse_ethtool,
    parse_ibdev2netdev,
    parse_ibstat,
    rail_link_status,
)


def _run(module, tool, args):
    """(output, error): error names a missing tool, a non-zero exit (kept even with output), or nothing."""
    path = module.get_bin_path(tool)
    if not path:
        return None, "%s is not installed" % tool
    rc, out, err = module.run_command([path] + args, environ_update={"LC_ALL": "C"})
    if rc != 0:
        detail = (err or "").strip() or (out or "").strip() or "no output"
        return (out or "") + "\n" + (err or ""), "%s %s exited %d: %s" % (tool, " ".join(args), rc, detail[-300:])
    return out + "\n" + (err or ""), None


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _read_mtu(sysfs_root, netdev):
    try:
        return int(_read(os.path.join(sysfs_root, "class", "net", netdev, "mtu")))
    except (TypeError, ValueError):
        return None


def _pci_function(sysfs_root, netdev):
    target = os.path.realpath(os.path.join(sysfs_root, "class", "net", netdev, "device"))
    name = os.path.basename(target)
    return (name, target) if re.match(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", name) else (None, None)


def _panics_for(device, errors):
    return [e for e in errors if device and ("'%s'" % device in e or " %s " % device in " %s " % e)]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rails=dict(type="list", elements="dict", required=True),
            mtu=dict(type="int", default=9000),
            min_speed_mbps=dict(type="int", default=200000),
            sysfs_root=dict(type="path", default="/sys"),
            pcie_sysfs_root=dict(type="path", default="/sys"),
            pcie_check=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    rails = module.params["rails"]
    for idx, rail in enumerate(rails):
        if not rail.get("netdev"):
            module.fail_json(msg="rails[%d] has no netdev: %r (expected {netdev, ipv4})" % (idx, rail))
    ibdev_out, ibdev_err = _run(module, "ibdev2netdev", [])
    if ibdev_out is None:
        module.fail_json(msg="cannot list the RDMA netdevs: %s (apt-get install mlnx-tools or ibverbs-utils)" % ibdev_err)
    ibstat_out, ibstat_err = _run(module, "ibstat", [])
    if ibstat_out is None:
        module.fail_json(msg="cannot read the RDMA ports: %s (apt-get install infiniband-diags)" % ibstat_err)
    rows = parse_ibdev2netdev(ibdev_out)
    ibstat = parse_ibstat(ibstat_out or "")
    devices = set()
    links = []
    problems = []
    warnings = []
    for rail in rails:
        netdev = rail["netdev"]
        eth_out, eth_err = _run(module, "ethtool", [netdev])
        speed = parse_ethtool(eth_out or "")["speed_mbps"]
        status = rail_link_status(rail, rows, ibstat, mtu=_read_mtu(module.params["sysfs_root"], netdev), speed_mbps=speed)
        devices.add(status["device"])
        if ibdev_err:
            status["problems"].append("%s: %s" % (netdev, ibdev_err))
        if eth_err:
            status["problems"].append("%s: %s" % (netdev, eth_err))
        want_mtu = module.params["mtu"]
        if want_mtu and status["mtu"] != want_mtu:
            status["problems"].append("%s has MTU %s, expected %d (a firmware reboot can reset it to 1500)"
                                      % (netdev, status["mtu"], want_mtu))
        want_speed = module.params["min_speed_mbps"]
        if want_speed and status["carrier"] == "Up" and (speed is None or speed < want_speed):
            status["problems"].append("%s negotiated %s Mb/s (ethtool), expected at least %d Mb/s"
                                      % (netdev, speed, want_speed))
        pci, target = _pci_function(module.params["pcie_sysfs_root"], netdev)
        status["pci"] = pci
        status["pcie_link_speed"] = _read(os.path.join(target, "current_link_speed")) if target else None
        status["pcie_link_width"] = _read(os.path.join(target, "current_link_width")) if target else None
        if module.params["pcie_check"]:
            pcie_problems, pcie_warnings = pcie_link_check(netdev, pci, status["pcie_link_speed"], status["pcie_link_width"])
            status["problems"].extend(pcie_problems)
            warnings.extend(pcie_warnings)
        links.append(status)
    # a tool that failed fails the rails it concerns even when it printed something (ibstat's ibpanic)
    unattributed = [e for e in ibstat["errors"] if not any(_panics_for(d, [e]) for d in devices)]
    for status in links:
        for error in _panics_for(status["device"], ibstat["errors"]) + unattributed:
            status["problems"].append("%s: ibstat reports ibpanic: %s" % (status["netdev"], error))
        if ibstat_err:
            status["problems"].append("%s: %s" % (status["netdev"], ibstat_err))
        problems.extend(status["problems"])
    _log, log_err = _run(module, "journalctl", ["-k", "-b", "0", "--no-pager", "-o", "short-monotonic"])
    slot_power = slot_power_lines(_log or "") if not log_err else {}
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"fabric_links": links}, problems=problems, healthy=not problems,
                     warnings_list=warnings, slot_power=slot_power)


if __name__ == "__main__":
    main()
