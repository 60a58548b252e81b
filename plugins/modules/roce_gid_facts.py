#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_gid_facts
short_description: Find the RoCE GID index of the fabric address and build the NCCL environment
version_added: 0.1.0
description:
  - Reads the RoCE GID table of the host, from C(show_gids) (mlnx-tools) when it is on C(PATH),
    otherwise from sysfs (C(<sysfs_root>/class/infiniband/<dev>/ports/<port>/gids/<n>) with
    C(gid_attrs/types/<n>) and C(gid_attrs/ndevs/<n>)), or from O(show_gids_output) when given.
  - Reads the state and link layer of every port from sysfs (C(<sysfs_root>/class/infiniband/<dev>/ports/<port>/state)
    and C(link_layer)) when the table comes from the host. A port whose state is not C(ACTIVE) (or whose link layer is
    not C(Ethernet)) is no candidate, as NCCL does not use it; a port whose state cannot be read stays one.
  - Matches each fabric address to the RDMA device and GID index that carry it as a RoCE v2 GID.
    The match is on the address, never on a position or a fixed index such as 3, because the index
    differs per node and drifts across reboots and link events.
  - Returns the table as the fact C(roce_gids) and the environment for NCCL, Gloo, TensorPipe and
    vLLM as the fact C(nccl_env).
  - Fails with a message naming the fabric address, listing what was found (devices, addresses,
    versions) and a hint, when the address is absent, exists only as RoCE v1, is found only on ports that are
    not ACTIVE (naming the port and its state), is carried by several ports, when several rails share no GID
    index, or when the output cannot be parsed.
  - The same parser runs on the nodes in C(dgxspark_nccl_resolve.py) (nic role) before every start of
    the serving unit, so this module is best used for checks and reporting, not to pin an index.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details: The module only reads; it returns the same facts in check mode.
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
options:
  fabric_ipv4:
    description:
      - The IPv4 address of this host on the RoCE fabric, or a list of them, one per rail (for example
        both PCIe twins of a DGX Spark ConnectX-7 port).
      - The first address is the primary rail; it gives C(VLLM_HOST_IP) and the socket interface.
      - An address may carry a prefix length (C(10.0.0.1/24)); with O(nccl_gid_auto) and the same
        network on every rail it becomes C(NCCL_IB_ADDR_RANGE).
    type: list
    elements: str
    required: true
  show_gids_output:
    description:
      - Output of C(show_gids) to parse instead of running anything on the host.
      - Tabs or spaces, CRLF, non-breaking spaces, indentation, comment prefixes, wrapped rows, a missing
        trailer and redacted GIDs are tolerated; tokens are recognised by their shape, not by column.
    type: str
  sysfs_root:
    description:
      - Root of the sysfs tree read for the port states, and for the GID table when C(show_gids) is not installed (or fails).
      - The port states are not read when O(show_gids_output) is given (a captured table, every port a candidate).
    type: path
    default: /sys
  roce_version:
    description:
      - The RoCE version the GID must have. NCCL over RoCE needs V(v2).
    type: str
    choices: [v1, v2]
    default: v2
  hca:
    description:
      - Only consider these RDMA devices (for example V(rocep1s0f0)). By default every device is considered.
      - An include list; NCCL's exclude form (C(^dev)) is refused.
      - The returned C(roce_gids) table is never filtered.
    type: list
    elements: str
  nccl_gid_auto:
    description:
      - When the rails have no common GID index, leave C(NCCL_IB_GID_INDEX) unset and let NCCL (2.21 or later)
        select the GID of each HCA (C(NCCL_IB_ADDR_FAMILY=AF_INET), C(NCCL_IB_ROCE_VERSION_NUM)).
      - Without it, rails without a common index make the module fail. A common index is always pinned.
      - C(NCCL_IB_GID_INDEX) is never set to an empty string, which NCCL reads as index 0 (a link-local GID).
    type: bool
    default: false
  socket_ifname:
    description:
      - Interface for C(NCCL_SOCKET_IFNAME), C(GLOO_SOCKET_IFNAME) and C(TP_SOCKET_IFNAME) instead of the netdev
        of the first rail. Needed when the first rail has no netdev in the table, and for a bootstrap network
        (O(host_ip)).
    type: str
  host_ip:
    description:
      - C(VLLM_HOST_IP) instead of the first fabric address, the node's address on O(socket_ifname), a network every
        node reaches (three nodes on direct cables, where rail 0 reaches one other node only).
    type: str
notes:
  - C(show_gids) is run with C(LC_ALL=C). If it exits non-zero the module warns and reads sysfs instead.
  - C(NCCL_IB_HCA) uses the exact-match form C(=dev1,dev2) and C(NCCL_SOCKET_IFNAME) the form C(=netdev),
    so that a prefix such as C(mlx5_1) or C(bond0) does not also select C(mlx5_10) or C(bond0.100).
seealso:
  - name: NCCL environment variables
    description: NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_IB_ADDR_FAMILY, NCCL_IB_ROCE_VERSION_NUM, NCCL_SOCKET_IFNAME.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
"""

EXAMPLES = r"""
- name: Find the RoCE v2 GID of the fabric address
  dgxspark.cluster.roce_gid_facts:
    fabric_ipv4: "{{ dgxspark_fabric_ipv4 }}"

- name: Use both PCIe twins of the ConnectX-7 port as two rails
  dgxspark.cluster.roce_gid_facts:
    fabric_ipv4:
      - 192.168.100.10
      - 192.168.101.10
    hca:
      - rocep1s0f0
      - roceP2p1s0f0

- name: Let NCCL pick the GID when the twins disagree on the index
  dgxspark.cluster.roce_gid_facts:
    fabric_ipv4: [192.168.100.10/24, 192.168.101.10/24]
    nccl_gid_auto: true

- name: Parse a captured table (no command runs on the host)
  dgxspark.cluster.roce_gid_facts:
    fabric_ipv4: 192.168.211.242
    show_gids_output: "{{ lookup('ansible.builtin.file', 'captures/show_gids.txt') }}"
  delegate_to: localhost

- name: Show the NCCL environment of this host
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nccl_env }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: success
  type: dict
  contains:
    roce_gids:
      description:
        - The GID table, one item per populated GID, in the order of the source.
        - O(hca) does not filter it.
      returned: success
      type: list
      elements: dict
      contains:
        device:
          description: RDMA device.
          type: str
          returned: success
          sample: rocep1s0f0
        port:
          description: Port number of the device.
          type: int
          returned: success
          sample: 1
        index:
          description: GID index, the value of C(NCCL_IB_GID_INDEX).
          type: int
          returned: success
          sample: 3
        gid:
          description: The GID, 8 groups of 4 lowercase hex digits (redacted GIDs are kept as given).
          type: str
          returned: success
          sample: "0000:0000:0000:0000:0000:ffff:c0a8:640a"
        ipv4:
          description: IPv4 address of an IPv4-mapped GID, empty otherwise.
          type: str
          returned: success
          sample: 192.168.100.10
        version:
          description: RoCE version of the GID.
          type: str
          returned: success
          choices: [v1, v2]
          sample: v2
        netdev:
          description: Network device of the GID, empty on InfiniBand ports.
          type: str
          returned: success
          sample: enp1s0f0np0
    nccl_env:
      description:
        - Environment variable name to string value for this host.
        - Always C(NCCL_IB_HCA) (form C(=dev1,dev2)), C(NCCL_SOCKET_IFNAME) (form C(=netdev)), C(GLOO_SOCKET_IFNAME),
          C(TP_SOCKET_IFNAME) and C(VLLM_HOST_IP); C(NCCL_IB_GID_INDEX) when the rails share an index, otherwise (with
          O(nccl_gid_auto)) C(NCCL_IB_ADDR_FAMILY), C(NCCL_IB_ROCE_VERSION_NUM) and possibly C(NCCL_IB_ADDR_RANGE).
      returned: success
      type: dict
      sample:
        NCCL_IB_HCA: "=rocep1s0f0,roceP2p1s0f0"
        NCCL_IB_GID_INDEX: "3"
        NCCL_SOCKET_IFNAME: "=enp1s0f0np0"
        GLOO_SOCKET_IFNAME: enp1s0f0np0
        TP_SOCKET_IFNAME: enp1s0f0np0
        VLLM_HOST_IP: 192.168.100.10
rails:
  description: Each fabric address with the device, port, netdev and RoCE GID indices that carry it.
  returned: success
  type: list
  elements: dict
  sample:
    - ipv4: 192.168.100.10
      device: rocep1s0f0
      port: 1
      netdev: enp1s0f0np0
      indices: [3]
gid_index:
  description: The GID index put in C(NCCL_IB_GID_INDEX), null when NCCL selects it (O(nccl_gid_auto)).
  returned: success
  type: int
  sample: 3
source:
  description: Where the table came from.
  returned: always
  type: str
  choices: [show_gids_output, show_gids, sysfs]
  sample: sysfs
summary:
  description: One line saying which index was picked for which device.
  returned: success
  type: str
  sample: "RoCE v2 GID index 3 for =rocep1s0f0: 192.168.100.10 -> rocep1s0f0 port 1 (netdev enp1s0f0np0) index 3"
problems:
  description: What the parser could not use (unrecognised lines, redacted GIDs, n_gids_found mismatch). Also emitted as warnings.
  returned: always
  type: list
  elements: str
  sample: []
roce_gids:
  description: The GID table (same items as the C(roce_gids) fact), returned on failure to help diagnosis.
  returned: failure
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.roce_gids import (
    RoceGidError,
    build_nccl_env,
    parse_show_gids,
    read_port_states,
    read_sysfs_gids,
)

_MAX_WARNINGS = 10


def _fabric_label(fabric_ipv4):
    return ', '.join(str(address) for address in fabric_ipv4) or '(none)'


def _load_table(module, params, problems):
    """Return (source, entries). Fails the module when the text is not show_gids output at all."""
    text = params['show_gids_output']
    source = 'show_gids_output'
    if text is None:
        show_gids = module.get_bin_path('show_gids')
        if show_gids:
            rc, out, err = module.run_command([show_gids], environ_update={'LC_ALL': 'C', 'LANG': 'C'})
            if rc == 0:
                text, source = out, 'show_gids'
            else:
                problems.append('%s exited %d (%s); read sysfs under %s instead' % (show_gids, rc, (err or out).strip()[:200], params['sysfs_root']))
    if text is None:
        return 'sysfs', read_sysfs_gids(params['sysfs_root'])

    result = parse_show_gids(text)
    problems.extend(result.problems)
    if not result.parseable:
        first = next((line.strip() for line in text.splitlines() if line.strip()), '')
        what = 'show_gids_output text' if source == 'show_gids_output' else 'show_gids output'
        module.fail_json(msg='cannot resolve fabric address %s: the %s is unparseable: %d non-blank line(s), none is a show_gids '
                             'row (DEV PORT INDEX GID [IPv4] VER [DEV]), header or n_gids_found trailer; first line: %r'
                             % (_fabric_label(params['fabric_ipv4']), what, result.text_lines, first[:120]),
                         source=source, problems=problems, roce_gids=[])
    return source, result.entries


def main():
    module = AnsibleModule(
        argument_spec=dict(
            fabric_ipv4=dict(type='list', elements='str', required=True),
            show_gids_output=dict(type='str'),
            sysfs_root=dict(type='path', default='/sys'),
            roce_version=dict(type='str', default='v2', choices=['v1', 'v2']),
            hca=dict(type='list', elements='str'),
            nccl_gid_auto=dict(type='bool', default=False),
            socket_ifname=dict(type='str'),
            host_ip=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = []
    source, entries = _load_table(module, params, problems)

    devices = set(entry['device'] for entry in entries)
    for name in params['hca'] or []:
        if name not in devices:
            problems.append('hca %s is not in the GID table' % name)

    port_states = read_port_states(params['sysfs_root']) if params['show_gids_output'] is None else {}
    try:
        resolution = build_nccl_env(entries, params['fabric_ipv4'], roce_version=params['roce_version'], hca=params['hca'],
                                    nccl_gid_auto=params['nccl_gid_auto'], socket_ifname=params['socket_ifname'],
                                    port_states=port_states, host_ip=params['host_ip'])
    except RoceGidError as exc:
        msg = exc.msg
        if source == 'sysfs' and not entries:
            msg += ' (read %s)' % os.path.join(params['sysfs_root'], 'class', 'infiniband')
        module.fail_json(msg=msg, source=source, problems=problems, roce_gids=entries)

    for problem in problems[:_MAX_WARNINGS]:
        module.warn('roce_gid_facts: %s' % problem)
    if len(problems) > _MAX_WARNINGS:
        module.warn('roce_gid_facts: %d more problem(s), see the problems return value' % (len(problems) - _MAX_WARNINGS))

    module.exit_json(
        changed=False,
        ansible_facts=dict(roce_gids=entries, nccl_env=resolution['env']),
        rails=resolution['rails'],
        gid_index=resolution['gid_index'],
        source=source,
        summary=resolution['summary'],
        problems=problems,
    )


if __name__ == '__main__':
    main()
