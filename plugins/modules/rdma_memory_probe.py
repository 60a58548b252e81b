#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rdma_memory_probe
short_description: Check that every fabric rail can register RDMA memory, and whether Kexec HandOver is on
version_added: 0.1.0
description:
  - For each fabric netdev in O(netdevs) finds its RDMA device (C(<sysfs_root>/class/net/<netdev>/device/infiniband/))
    and runs perftest's C(ib_write_bw) as a loopback on it (server and client on this host, the out-of-band
    exchange over C(127.0.0.1), perftest's own GID choice, one queue pair, C(-s) O(size), C(-D 1)). Both ends
    register their buffer (2 x O(size) bytes each) and release it when they exit; a failed registration reads
    C(Couldn't allocate MR with error=12) (ENOMEM).
  - Reads the running kernel (C(<proc_root>/sys/kernel/osrelease)), its build configuration
    (C(<boot_dir>/config-<release>)) and the command line (C(<proc_root>/cmdline)), and tells whether Kexec
    HandOver (KHO) is on, as the kernel decides it (C(CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT), then every C(kho=)
    on the command line, the last one winning). On the arm64 nvidia 7.0 kernel KHO makes C(ibv_reg_mr) fail with
    ENOMEM under GPU-memory pressure (NVIDIA/NV-Kernels PRs 590 and 591).
  - Returns O(node)'s verdict in RV(problem) (empty when every rail registered and KHO is off); it does not fail on
    it, so the caller decides. Fails only on a bad argument or a rail whose RDMA device cannot be found.
  - The probe only reads; its buffers live as long as the two C(ib_write_bw) processes. Runs in check mode too.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A probe changes nothing; it runs in check mode as well.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  node:
    description: The node's name, as the message names it (the inventory hostname).
    type: str
    required: true
  netdevs:
    description: The fabric netdevs (rails) whose RDMA devices are probed, for example V(enp1s0f1np1).
    type: list
    elements: str
    required: true
  size:
    description:
      - Message size C(-s); each end registers 2 x O(size) bytes with one queue pair.
      - NCCL registers buffers of C(NCCL_BUFFSIZE), 4 MiB by default; the default 4 MiB message registers 8 MiB.
    type: int
    default: 4194304
  tcp_port:
    description: TCP port of perftest's out-of-band exchange on 127.0.0.1 (C(-p)); must be free.
    type: int
    default: 18517
  timeout:
    description: Seconds each device's probe may take before both processes are killed.
    type: int
    default: 30
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  proc_root:
    description: Where /proc is mounted (C(sys/kernel/osrelease) and C(cmdline) are read under it).
    type: path
    default: /proc
  boot_dir:
    description: Where the kernels' build configurations (C(config-<release>)) are.
    type: path
    default: /boot
  probe:
    description: Run the registration probe (V(false) reads only the kernel and KHO state).
    type: bool
    default: true
  lock_file:
    description:
      - The probes of one node take an exclusive C(flock) on this file first, so two runs on one node (C(site.yml)
        beside C(doctor.yml)) never start two servers on O(tcp_port). Its directory must be writable by root
        only; the file is created once and left in place (C(/run) is a tmpfs).
    type: path
    default: /run/dgxspark-rdma-probe.lock
  lock_timeout:
    description: Seconds to wait for another run's probe to release O(lock_file) before failing.
    type: int
    default: 300
notes:
  - Needs C(ib_write_bw) on the node (Debian/Ubuntu package C(perftest)) when O(probe) is true.
seealso:
  - module: dgxspark.cluster.ib_write_bw
"""

EXAMPLES = r"""
- name: Probe RDMA memory registration on both rails and read the KHO state
  dgxspark.cluster.rdma_memory_probe:
    node: "{{ inventory_hostname }}"
    netdevs: [enp1s0f1np1, enP2p1s0f1np1]
  register: mr_probe

- name: Stop before any change when a rail cannot register memory or KHO is on
  ansible.builtin.assert:
    that: mr_probe.problem | length == 0
    fail_msg: "{{ mr_probe.problem }}"
"""

RETURN = r"""
kernel:
  description: The running kernel release.
  returned: always
  type: str
  sample: 7.0.0-1019-nvidia
kho:
  description: KHO on this boot; C(compiled) and C(active) are null when the kernel's config could not be read.
  returned: always
  type: dict
  sample: {compiled: true, default: true, cmdline: [], active: true}
cmdline:
  description: The kernel command line.
  returned: always
  type: str
devices:
  description: The RDMA device of each netdev.
  returned: always
  type: dict
  sample: {enp1s0f1np1: rocep1s0f1}
verdicts:
  description: Per device, whether the buffer registered (null when the probe could not reach registration), errno and error.
  returned: always
  type: list
  elements: dict
problem:
  description: The failure text naming the node, the kernel, the probe's error and the remedy; empty when all is well.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest_probe import LockError, NodeLock, Probe, ProbeError
from ansible_collections.dgxspark.cluster.plugins.module_utils.rdma_memory import (
    kho_state,
    mr_probe_verdict,
    problem_message,
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def probe_device(binary, device, p):
    """One loopback ib_write_bw on ``device``: its registration verdict."""
    probe = Probe(binary, device, None, '127.0.0.1', tcp_port=p['tcp_port'], duration=1, size=p['size'],
                  timeout=p['timeout'], loopback=True, qps=1)
    try:
        result = probe.run()
    except ProbeError as exc:
        result = dict(exc.result, rc=exc.result.get('rc', -1), stderr=(exc.result.get('stderr') or '') + '\n' + exc.msg)
    return mr_probe_verdict(device, result.get('stdout', ''), result.get('stderr', ''), result.get('rc'),
                            result.get('server_stdout', ''), result.get('server_stderr', ''))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type='str', required=True),
            netdevs=dict(type='list', elements='str', required=True),
            size=dict(type='int', default=4194304),
            tcp_port=dict(type='int', default=18517),
            timeout=dict(type='int', default=30),
            sysfs_root=dict(type='path', default='/sys'),
            proc_root=dict(type='path', default='/proc'),
            boot_dir=dict(type='path', default='/boot'),
            probe=dict(type='bool', default=True),
            lock_file=dict(type='path', default='/run/dgxspark-rdma-probe.lock'),
            lock_timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ('size', 'timeout', 'tcp_port', 'lock_timeout'):
        if p[name] <= 0:
            module.fail_json(msg='%s: %s must be positive, got %d' % (p['node'], name, p[name]))

    kernel = (_read(os.path.join(p['proc_root'], 'sys', 'kernel', 'osrelease')) or '').strip()
    cmdline = (_read(os.path.join(p['proc_root'], 'cmdline')) or '').strip()
    config = _read(os.path.join(p['boot_dir'], 'config-' + kernel)) if kernel else None
    kho = kho_state(config, cmdline)

    devices = {}
    for netdev in p['netdevs']:
        where = os.path.join(p['sysfs_root'], 'class', 'net', netdev, 'device', 'infiniband')
        try:
            names = sorted(os.listdir(where))
        except OSError:
            names = []
        if not names:
            module.fail_json(msg='%s: no RDMA device found for the fabric netdev %s (%s is missing or empty): is it a '
                                 'ConnectX port, and is the netdev name right (dgxspark_fabric_rails)?'
                                 % (p['node'], netdev, where), kernel=kernel, kho=kho)
        devices[netdev] = names[0]

    verdicts = []
    if p['probe']:
        binary = module.get_bin_path('ib_write_bw')
        if not binary:
            module.fail_json(msg='%s: ib_write_bw is not installed (the RDMA memory-registration probe runs it); '
                                 'install it with: apt-get install perftest' % p['node'], kernel=kernel, kho=kho)
        try:
            with NodeLock(p['lock_file'], p['lock_timeout']):
                for netdev in p['netdevs']:
                    verdicts.append(probe_device(binary, devices[netdev], p))
        except LockError as exc:
            module.fail_json(msg='%s: the RDMA memory-registration probe did not run: %s; nothing was changed on '
                                 'this node.' % (p['node'], exc), kernel=kernel, kho=kho)

    module.exit_json(changed=False, kernel=kernel, kho=kho, cmdline=cmdline, devices=devices, verdicts=verdicts,
                     problem=problem_message(p['node'], kernel, kho, verdicts, 2 * p['size']))


if __name__ == '__main__':
    main()
