# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Before serving: can every rail register memory, and is Kexec HandOver (KHO) off (stdlib only, pure).

Why (NVIDIA/NV-Kernels PRs #590/#591; MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark issue #259): the
arm64 ``nvidia`` kernel 7.0 (``7.0.0-1019-nvidia``) builds KHO in and enables it by default
(``CONFIG_KEXEC_HANDOVER=y``, ``CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=y``). Its scratch area, about 9.3 GiB
on a Spark, is released as ``MIGRATE_CMA`` pageblocks, unfit for long-term pins: under GPU-memory pressure
``pin_user_pages_fast()`` fails with ``-ENOMEM`` through ``ib_umem_get()`` / ``mlx5_ib_reg_user_mr()`` to
``ibv_reg_mr_iova2()``, and NCCL loses its ranks. Booting with ``kho=off`` (or a kernel built with
``CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=n``, or the previous 6.x kernel) fixes it.

KHO is read as the kernel does (kernel/liveupdate/kexec_handover.c): ``kho_enable`` starts at
``IS_ENABLED(CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT)`` and every ``kho=`` early parameter on the command
line sets it through ``kstrtobool`` (lib/kstrtox.c: ``y Y t T 1`` and ``on`` true, ``n N f F 0`` and
``off`` false; anything else leaves it as it was); the last one wins.

The memory-registration probe is perftest's ``ib_write_bw`` run as a loopback on each rail device: both
ends register their buffer (``2 * max(size, cycle buffer) * qps`` bytes) in ``ctx_init`` before any RDMA
traffic, and a failed registration prints (perftest src/perftest_resources.c ``register_memory_region``,
``create_mr``, ``ctx_init``; src/write_bw.c ``main``), exit 1::

    Couldn't allocate MR with error=12
    failed to create mr
    Failed to create MR
     Couldn't create IB resources

(older perftest: ``Couldn't allocate MR`` without the errno). The test information block
(``RDMA_Write BW Test``) is printed only after ``ctx_init``: its presence means the buffer registered.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno as errno_mod
import os
import re

__all__ = ['parse_kernel_config', 'kstrtobool', 'cmdline_kho', 'kho_state', 'mr_probe_verdict',
           'problem_message', 'ERRNO_TEXT']

_MR_FAILED = re.compile(r"Couldn't allocate MR(?: with error=(\d+))?")
_PAST_INIT = re.compile(r"RDMA_Write BW Test")
_CONFIG_LINE = re.compile(r'^(CONFIG_[A-Za-z0-9_]+)=(.*)$')
_NOT_SET = re.compile(r'^# (CONFIG_[A-Za-z0-9_]+) is not set$')
_PERFTEST_ERRORS = re.compile(
    r"(IB device \S+ not found|Did not detect devices|Unable to find the Infiniband/RoCE device|"
    r"Port number \d+ state is \S+|Couldn't set the link layer|Couldn't get context for the device|"
    r"Couldn't listen to port \d+|Couldn't connect to \S+|Unable to init the socket connection|"
    r"Couldn't create IB resources|Failed to create MR)")

ERRNO_TEXT = {errno_mod.ENOMEM: ('ENOMEM', 'Cannot allocate memory'),
              errno_mod.EFAULT: ('EFAULT', 'Bad address'),
              errno_mod.EPERM: ('EPERM', 'Operation not permitted'),
              errno_mod.EINVAL: ('EINVAL', 'Invalid argument'),
              errno_mod.EOPNOTSUPP: ('EOPNOTSUPP', 'Operation not supported')}


def parse_kernel_config(text):
    """``/boot/config-<release>`` as a dict: ``{'CONFIG_X': 'y'}``; ``# CONFIG_X is not set`` reads ``'n'``."""
    config = {}
    for line in (text or '').splitlines():
        line = line.strip()
        match = _CONFIG_LINE.match(line)
        if match:
            config[match.group(1)] = match.group(2).strip().strip('"')
            continue
        match = _NOT_SET.match(line)
        if match:
            config[match.group(1)] = 'n'
    return config


def kstrtobool(value):
    """lib/kstrtox.c kstrtobool: True, False, or None where the kernel returns -EINVAL."""
    text = value or ''
    if not text:
        return None
    first = text[0]
    if first in 'yYtT1':
        return True
    if first in 'nNfF0':
        return False
    if first in 'oO' and len(text) > 1:
        if text[1] in 'nN':
            return True
        if text[1] in 'fF':
            return False
    return None


def cmdline_kho(cmdline):
    """Every ``kho=`` value on the kernel command line, in order (``kho`` alone carries no value)."""
    values = []
    for token in (cmdline or '').split():
        if token.startswith('kho='):
            values.append(token[len('kho='):])
    return values


def kho_state(config_text, cmdline):
    """What KHO does on this boot.

    ``config_text`` is None when /boot/config-<release> could not be read. Returns
    ``{'compiled': True/False/None, 'default': bool, 'cmdline': [values], 'active': True/False/None}``
    (``None``: not known, the config is missing).
    """
    values = cmdline_kho(cmdline)
    if config_text is None:
        return {'compiled': None, 'default': False, 'cmdline': values, 'active': None}
    config = parse_kernel_config(config_text)
    compiled = config.get('CONFIG_KEXEC_HANDOVER') == 'y'
    enabled = config.get('CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT') == 'y'
    default = enabled
    for value in values:
        parsed = kstrtobool(value)
        if parsed is not None:
            enabled = parsed
    return {'compiled': compiled, 'default': default, 'cmdline': values, 'active': compiled and enabled}


def _error_line(text):
    for line in (text or '').splitlines():
        match = _PERFTEST_ERRORS.search(line)
        if match:
            return match.group(1)
    return ''


def mr_probe_verdict(device, stdout, stderr, rc, server_stdout='', server_stderr=''):
    """What one loopback ``ib_write_bw`` says about memory registration on ``device``.

    ``{'device', 'registered': True/False/None, 'errno': int or None, 'error': 'ENOMEM (Cannot allocate
    memory)' or a perftest line, 'detail': str}``: ``registered`` None means the tool stopped before it
    tried (device not found, port down, no connection): the probe did not run.
    """
    outputs = [stderr or '', server_stderr or '', stdout or '', server_stdout or '']
    for text in outputs:
        match = _MR_FAILED.search(text)
        if match:
            number = int(match.group(1)) if match.group(1) else None
            if number in ERRNO_TEXT:
                error = '%s (%s, error=%d)' % (ERRNO_TEXT[number][0], ERRNO_TEXT[number][1], number)
            elif number is not None:
                error = 'error=%d (%s)' % (number, os.strerror(number))
            else:
                error = "Couldn't allocate MR (no errno printed)"
            return {'device': device, 'registered': False, 'errno': number, 'error': error,
                    'detail': match.group(0)}
    if rc == 0 or _PAST_INIT.search(stdout or '') or _PAST_INIT.search(server_stdout or ''):
        return {'device': device, 'registered': True, 'errno': None, 'error': '', 'detail': ''}
    line = ''
    for text in outputs:
        line = _error_line(text)
        if line:
            break
    tail = ' '.join(((stderr or stdout or '').strip().splitlines() or ['(no output)'])[-2:])
    return {'device': device, 'registered': None, 'errno': None, 'error': line or 'exit %s' % rc,
            'detail': tail[-300:]}


def problem_message(node, kernel, kho, verdicts, size):
    """The failure text for one node, or '' when every rail registered and KHO is off.

    Names the node, the kernel, the probe's error per device and the remedy.
    """
    failed = [v for v in verdicts if v.get('registered') is False]
    unprobed = [v for v in verdicts if v.get('registered') is None]
    parts = []
    if failed:
        parts.append('RDMA memory registration failed on %s (ib_write_bw loopback registering %d bytes: %s)'
                     % (', '.join(v['device'] for v in failed), size,
                        '; '.join('%s: %s' % (v['device'], v['error']) for v in failed)))
    if kho.get('active'):
        given = ' '.join('kho=' + v for v in kho.get('cmdline') or []) or 'no kho= option'
        parts.append('Kexec HandOver (KHO) is on (CONFIG_KEXEC_HANDOVER=y, CONFIG_KEXEC_HANDOVER_ENABLE_DEFAULT=%s, '
                     'command line: %s): its scratch memory (about 9.3 GiB on a Spark) cannot hold long-term pins, '
                     'so ibv_reg_mr fails with ENOMEM under GPU-memory pressure and NCCL loses its ranks'
                     % ('y' if kho.get('default') else 'n', given))
    if unprobed and not failed:
        parts.append('the memory-registration probe could not run on %s (%s)'
                     % (', '.join(v['device'] for v in unprobed),
                        '; '.join('%s: %s' % (v['device'], v['error']) for v in unprobed)))
    if not parts:
        return ''
    if failed or kho.get('active'):
        remedy = ('Add kho=off to the boot loader\'s kernel command line (GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, '
                  'then update-grub and a reboot), or boot the previous kernel (6.x); nothing was changed on this node.')
    else:
        remedy = ('Check the rail (cable, port state, the RDMA device names) and that perftest is installed; '
                  'nothing was changed on this node.')
    return '%s (kernel %s): %s. %s' % (node, kernel or 'unknown', '; '.join(parts), remedy)
