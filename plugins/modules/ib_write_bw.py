#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ib_write_bw
short_description: Measure the RDMA write bandwidth of one fabric rail with perftest's ib_write_bw
version_added: 0.1.0
description:
  - Runs C(ib_write_bw) (perftest) on one RDMA device and GID index with O(qps) queue pairs for O(duration)
    seconds with C(-F --report_gbits) and returns the average bandwidth in Gb/s, summed over the queue pairs
    (perftest prints one row for all of them).
  - The defaults are NVIDIA's check of a DGX Spark rail, C(ib_write_bw ... -F --report_gbits -q 4 -D 5); a
    threshold such as the nic role's 80 Gb/s belongs to that 4-QP run.
  - When O(address) is one of this host's own IPv4 addresses the test is a B(loopback) test; the module starts
    the C(ib_write_bw) server itself in the background, then runs the client against O(address), both on this
    node and on the same device, so the traffic leaves through the ConnectX-7 port and comes back. The result
    depends on this node's link only. This is how the nic role attributes a throttled link (a stale-initialised
    rail moves about 13 Gb/s instead of about 98) to a node rather than to the pair.
  - Otherwise only the client runs, against an C(ib_write_bw) server that must already be running on the peer
    with the same O(tcp_port) and O(qps) (for example
    C(ib_write_bw -d <dev> -x <index> -p 18515 -q 4 -D 5 -F --report_gbits)).
    The result is then the slower of the two ends.
  - Fails with a message naming the device and the address when C(ib_write_bw) is not installed, exits non-zero
    (unknown device, port down, unusable GID index, no server), prints output that does not parse or reports
    another number of queue pairs than O(qps), or does not finish within O(timeout) seconds (both processes are
    then killed).
  - The probe only reads; it changes nothing on the host and runs in check mode too.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A bandwidth probe changes nothing; it runs in check mode as well.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  device:
    description: RDMA device to test (C(-d)), for example V(rocep1s0f1).
    type: str
    required: true
  gid_index:
    description:
      - GID index (C(-x)) of the RoCE v2 GID that carries the fabric address on O(device); see
        M(dgxspark.cluster.roce_gid_facts). An empty index makes C(ib_write_bw) fail.
    type: int
    required: true
  address:
    description:
      - Fabric IPv4 address to test against. One of this host's own addresses selects the loopback test;
        any other address is the peer running the server.
    type: str
    required: true
  loopback:
    description:
      - Force the loopback test (V(true)) or the client-only test (V(false)). By default the module decides from
        whether O(address) is one of this host's addresses.
    type: bool
  ib_port:
    description: Port of the RDMA device (C(-i)).
    type: int
    default: 1
  tcp_port:
    description: TCP port of the out-of-band exchange between server and client (C(-p)).
    type: int
    default: 18515
  duration:
    description: Seconds the test runs (C(-D)). BW peak is not measured in this mode (perftest reports 0.00).
    type: int
    default: 5
  qps:
    description:
      - Queue pairs (C(-q)); the server on the peer must use the same number (perftest marks C(-q) SYMMETRIC).
      - NVIDIA's check uses 4; a single queue pair is not what a Gb/s threshold taken from that check was measured
        with.
    type: int
    default: 4
  size:
    description: Message size in bytes (C(-s)).
    type: int
    default: 65536
  timeout:
    description:
      - Seconds after which the module kills the client (and the server it started) and fails.
      - Must leave room for O(duration) plus the connection set-up.
    type: int
    default: 30
notes:
  - Needs C(ib_write_bw) on the node (Debian/Ubuntu package C(perftest)).
  - The command always carries C(-F --report_gbits); a loopback test binds O(tcp_port) on this host, so two
    loopback tests on the same host must not share it at the same time.
seealso:
  - name: perftest
    description: The RDMA benchmarks (ib_write_bw, ib_read_bw, ...).
    link: https://github.com/linux-rdma/perftest
"""

EXAMPLES = r"""
- name: Loopback test of a rail (names this node if its link is throttled)
  dgxspark.cluster.ib_write_bw:
    device: rocep1s0f1
    gid_index: 3
    address: 192.168.100.1          # this node's own fabric address
  register: rail_bw

- name: Fail on a throttled rail
  ansible.builtin.assert:
    that: rail_bw.bw_gbps >= 80
    fail_msg: "{{ inventory_hostname }} rocep1s0f1 moves {{ rail_bw.bw_gbps }} Gb/s (stale-initialised link?)"

- name: Client against a server started on the peer
  dgxspark.cluster.ib_write_bw:
    device: rocep1s0f1
    gid_index: 3
    address: 192.168.100.2          # the peer, running: ib_write_bw -d rocep1s0f1 -x 3 -q 4 -D 5 -F --report_gbits
    qps: 4
    duration: 5
"""

RETURN = r"""
bw_gbps:
  description: Average bandwidth in Gb/s (the C(BW average[Gb/sec]) column of the client).
  returned: success
  type: float
  sample: 97.93
bw_peak_gbps:
  description: Peak bandwidth in Gb/s; 0.0 when perftest does not measure it (duration mode).
  returned: success
  type: float
  sample: 0.0
msg_rate_mpps:
  description: Message rate in millions of messages per second.
  returned: success
  type: float
  sample: 0.186792
qps:
  description: Queue pairs of the run, as perftest reports them (C(Number of qps)).
  returned: success
  type: int
  sample: 4
iterations:
  description: Messages counted by perftest (all queue pairs).
  returned: success
  type: int
  sample: 373584
mode:
  description: V(loopback) (server and client on this host) or V(client) (server on the peer).
  returned: always
  type: str
  sample: loopback
cmd:
  description: The client command line.
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/ib_write_bw, -d, rocep1s0f1, -i, "1", -x, "3", -p, "18515", -q, "4", -D, "5", -s, "65536",
           -F, --report_gbits, 192.168.100.1]
stdout:
  description: Raw output of the client.
  returned: when the client ran
  type: str
stderr:
  description: Error output of the client.
  returned: when the client ran
  type: str
rc:
  description: Exit status of the client.
  returned: when the client ran
  type: int
server_cmd:
  description: The server command line (loopback only).
  returned: loopback
  type: list
  elements: str
server_stdout:
  description: Raw output of the server the module started (loopback only).
  returned: loopback
  type: str
server_stderr:
  description: Error output of that server (loopback only).
  returned: loopback
  type: str
perftest:
  description: Everything parsed from the client output (test, device, gid_index, link_type, mtu, qps, unit, rows, ...).
  returned: success
  type: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest import parse_ib_write_bw
from ansible_collections.dgxspark.cluster.plugins.module_utils.perftest_probe import (
    NO_SERVER,
    Probe,
    ProbeError,
    is_local_address,
    tail,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            device=dict(type='str', required=True),
            gid_index=dict(type='int', required=True),
            address=dict(type='str', required=True),
            loopback=dict(type='bool'),
            ib_port=dict(type='int', default=1),
            tcp_port=dict(type='int', default=18515),
            duration=dict(type='int', default=5),
            qps=dict(type='int', default=4),
            size=dict(type='int', default=65536),
            timeout=dict(type='int', default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    address = params['address'].strip()
    params['address'] = address
    if not re.match(r'^\d{1,3}(\.\d{1,3}){3}$', address) or any(int(part) > 255 for part in address.split('.')):
        module.fail_json(msg='address %r is not an IPv4 address (device %s)' % (address, params['device']))
    for name in ('duration', 'size', 'timeout', 'tcp_port', 'ib_port', 'qps'):
        if params[name] <= 0:
            module.fail_json(msg='%s must be positive, got %d (device %s, address %s)'
                                 % (name, params[name], params['device'], address))
    if params['gid_index'] < 0:
        module.fail_json(msg='gid_index must be 0 or more, got %d (device %s, address %s)'
                             % (params['gid_index'], params['device'], address))

    loopback = params['loopback']
    if loopback is None:
        loopback = is_local_address(address)
    mode = 'loopback' if loopback else 'client'

    binary = module.get_bin_path('ib_write_bw')
    if not binary:
        module.fail_json(msg='ib_write_bw is not installed on this host (needed to test device %s against %s); '
                             'install it with: apt-get install perftest' % (params['device'], address),
                         mode=mode, cmd=[])

    probe = Probe(binary, params['device'], params['gid_index'], address, ib_port=params['ib_port'],
                  tcp_port=params['tcp_port'], duration=params['duration'], size=params['size'],
                  timeout=params['timeout'], loopback=loopback, qps=params['qps'])
    try:
        result = probe.run()
    except ProbeError as exc:
        module.fail_json(msg=exc.msg, changed=False, **_without_warnings(module, exc.result))
    result = _without_warnings(module, result)
    result['changed'] = False
    rc, stdout, stderr = result['rc'], result['stdout'], result['stderr']

    if rc != 0:
        hint = ''
        if NO_SERVER in stderr and not loopback:
            hint = '; is the server running on the peer? (%s)' % ' '.join(['ib_write_bw'] + probe.server_cmd[1:])
        detail = tail(stderr) or tail(stdout) or '(no output)'
        if loopback and not stderr.strip() and result.get('server_stderr'):
            detail += ' / server: ' + tail(result['server_stderr'])
        module.fail_json(msg='ib_write_bw exited %d on %s (%s): %s%s' % (rc, probe.where, mode, detail, hint), **result)
    try:
        parsed = parse_ib_write_bw(stdout)
    except ValueError as exc:
        module.fail_json(msg='ib_write_bw output on %s (%s) does not parse: %s' % (probe.where, mode, exc), **result)

    if parsed.get('qps') is not None and parsed['qps'] != params['qps']:
        module.fail_json(msg='ib_write_bw on %s (%s) reports %d queue pairs, asked for %d: the figure is not comparable'
                             % (probe.where, mode, parsed['qps'], params['qps']), **result)
    result.update(
        qps=parsed.get('qps'),
        bw_gbps=round(parsed['gbps_average'], 2),
        bw_peak_gbps=round(parsed['gbps_peak'], 2),
        msg_rate_mpps=parsed['msg_rate'],
        iterations=parsed['iterations'],
        perftest=parsed,
    )
    if parsed.get('device') and parsed['device'] != params['device']:
        module.warn('ib_write_bw reports device %s, asked for %s' % (parsed['device'], params['device']))
    module.exit_json(**result)


def _without_warnings(module, result):
    """Emit the probe's warnings through the module and drop them from the result."""
    result = dict(result)
    for warning in result.pop('warnings', []):
        module.warn(warning)
    return result


if __name__ == '__main__':
    main()
