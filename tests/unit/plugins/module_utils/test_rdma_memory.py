# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KHO reading and the memory-registration verdict of the preflight's RDMA probe."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.rdma_memory import (
    cmdline_kho,
    kho_state,
    kstrtobool,
    mr_probe_verdict,
    parse_kernel_config,
    problem_message,
)

KHO_CONFIG = "CONFIG_KEXEC_FILE=y\nCONFIG_KEXEC_HANDOVER=y\nCONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y\n"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia root=UUID=0 ro quiet splash"
# perftest src/perftest_resources.c register_memory_region / create_mr, ctx_init; write_bw.c main (exit 1)
ENOMEM_STDERR = ("Couldn't allocate MR with error=12\nfailed to create mr\nFailed to create MR\n"
                 " Couldn't create IB resources\n")
HEADER = ("---------------------------------------------------------------------------------------\n"
          "                    RDMA_Write BW Test\n Dual-port       : OFF\t\tDevice         : rocep1s0f1\n")


def test_config_lines_and_not_set():
    config = parse_kernel_config(KHO_CONFIG + "# CONFIG_KEXEC_HANDOVER_DEBUG is not set\nCONFIG_LOCALVERSION=\"\"\n")
    assert config['CONFIG_KEXEC_HANDOVER'] == 'y'
    assert config['CONFIG_KEXEC_HANDOVER_DEBUG'] == 'n'
    assert config['CONFIG_LOCALVERSION'] == ''


@pytest.mark.parametrize('value, expected', [
    ('off', False), ('on', True), ('0', False), ('1', True), ('n', False), ('Y', True), ('false', False),
    ('true', True), ('maybe', None), ('', None), ('o', None),
])
def test_kstrtobool_as_the_kernel(value, expected):
    assert kstrtobool(value) is expected


def test_kho_on_by_default_without_kho_off():
    state = kho_state(KHO_CONFIG, CMDLINE)
    assert state == {'compiled': True, 'default': True, 'cmdline': [], 'active': True}


def test_kho_off_turns_it_off_and_the_last_one_wins():
    assert kho_state(KHO_CONFIG, CMDLINE + " kho=off")['active'] is False
    assert kho_state(KHO_CONFIG, CMDLINE + " kho=off kho=on")['active'] is True
    assert kho_state(KHO_CONFIG, CMDLINE + " kho=on kho=0")['active'] is False
    assert kho_state(KHO_CONFIG, CMDLINE + " kho=bogus")['active'] is True   # -EINVAL leaves the default
    assert cmdline_kho(CMDLINE + " kho=off nokho=1 kho") == ['off']


def test_kho_compiled_but_off_by_default_needs_kho_on():
    config = "CONFIG_KEXEC_HANDOVER=y\n# CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT is not set\n"
    assert kho_state(config, CMDLINE)['active'] is False
    assert kho_state(config, CMDLINE + " kho=on")['active'] is True


def test_kernel_without_kho_and_missing_config():
    assert kho_state("CONFIG_KEXEC=y\n", CMDLINE)['active'] is False
    assert kho_state(None, CMDLINE) == {'compiled': None, 'default': False, 'cmdline': [], 'active': None}


def test_enomem_verdict():
    verdict = mr_probe_verdict('rocep1s0f1', '', ENOMEM_STDERR, 1, '', ENOMEM_STDERR)
    assert verdict['registered'] is False
    assert verdict['errno'] == 12
    assert verdict['error'].startswith('ENOMEM (Cannot allocate memory')


def test_old_perftest_without_errno():
    verdict = mr_probe_verdict('rocep1s0f1', '', "Couldn't allocate MR\n Couldn't create IB resources\n", 1)
    assert verdict['registered'] is False and verdict['errno'] is None


def test_registered_when_the_run_passes_or_got_past_ctx_init():
    assert mr_probe_verdict('rocep1s0f1', HEADER, '', 0)['registered'] is True
    later = mr_probe_verdict('rocep1s0f1', HEADER, "\n Found Incompatibility issue with GID types.\n", 1)
    assert later['registered'] is True


def test_not_reached_when_the_port_is_down():
    verdict = mr_probe_verdict('rocep1s0f1', '', " Port number 1 state is Down\n Couldn't set the link layer\n", 1)
    assert verdict['registered'] is None
    assert verdict['error'] == 'Port number 1 state is Down'


def test_message_names_node_kernel_enomem_and_kho_off():
    kho = kho_state(KHO_CONFIG, CMDLINE)
    verdicts = [mr_probe_verdict('rocep1s0f1', '', ENOMEM_STDERR, 1), mr_probe_verdict('roceP2p1s0f1', '', ENOMEM_STDERR, 1)]
    msg = problem_message('spark-head', '7.0.0-1019-nvidia', kho, verdicts, 8388608)
    assert msg.startswith('spark-head (kernel 7.0.0-1019-nvidia): RDMA memory registration failed on rocep1s0f1, roceP2p1s0f1')
    for needle in ('ENOMEM', 'kho=off', 'previous kernel', 'Kexec HandOver (KHO) is on', 'nothing was changed'):
        assert needle in msg


def test_kho_on_fails_even_when_an_idle_probe_registers():
    # the real failure needs GPU-memory pressure (NV-Kernels #590: at 108 GiB committed): an idle node may register
    msg = problem_message('spark-worker', '7.0.0-1019-nvidia', kho_state(KHO_CONFIG, CMDLINE),
                          [mr_probe_verdict('rocep1s0f1', HEADER, '', 0)], 8388608)
    assert 'spark-worker' in msg and 'kho=off' in msg and 'ENOMEM' in msg


def test_all_well_is_empty():
    kho = kho_state(KHO_CONFIG, CMDLINE + " kho=off")
    assert problem_message('spark-head', '7.0.0-1019-nvidia', kho, [mr_probe_verdict('rocep1s0f1', HEADER, '', 0)], 1) == ''
    assert problem_message('spark-head', '6.17.0-1014-nvidia', kho_state(None, ''), [], 1) == ''


def test_unprobed_rail_names_the_reason_without_kho_remedy():
    verdicts = [mr_probe_verdict('rocep1s0f1', '', " Port number 1 state is Down\n", 1)]
    msg = problem_message('spark-head', '6.17.0-1014-nvidia', kho_state(None, CMDLINE), verdicts, 1)
    assert 'could not run on rocep1s0f1' in msg and 'Port number 1 state is Down' in msg
    assert 'kho=off' not in msg
