# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the NCCL / host environment file of this node from the live RoCE GID table.

Runs as ExecStartPre of the serving unit, before every start: the RoCE v2 GID
index of the fabric address differs per node and drifts across reboots and
link events, so it is resolved now, never shipped as a constant.

    dgxspark_nccl_resolve.py --fabric-ipv4 IP [--fabric-ipv4 IP2] [--sysfs-root /sys]
                          [--show-gids-cmd show_gids] [--output /run/dgxspark/nccl.env]
                          [--nccl-gid-auto] [--static-env FILE]

The table comes from ``show_gids`` when that command is found (LC_ALL=C),
otherwise from sysfs. The port states always come from sysfs
(``<sysfs-root>/class/infiniband/<dev>/ports/<p>/state`` and ``link_layer``):
a port that is not ACTIVE is skipped, as NCCL skips it (a pulled cable keeps
the port's GIDs while the netdev keeps its address); a port whose state cannot
be read stays a candidate. The parser and the environment logic are the module
``roce_gids`` that the nic role installs beside this script in
/usr/local/lib/dgxspark (the collection's plugins/module_utils/roce_gids.py);
set DGXSPARK_LIB to import it from elsewhere.

Writes KEY=value lines (systemd EnvironmentFile syntax) atomically, mode 0644,
and logs one line to stderr saying which GID index it picked for which device.
Fails closed: when no RoCE v2 GID carries the fabric address it exits 1 with a
message naming the address and what was found, and removes a stale output file
so nothing starts with an old index. Exit 2: usage error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

PROG = 'dgxspark_nccl_resolve.py'
DEFAULT_LIB = '/usr/local/lib/dgxspark'
DEFAULT_OUTPUT = '/run/dgxspark/nccl.env'
EXIT_FAILED = 1


class ResolveError(Exception):
    """Fail closed with this message."""


def log(message):
    sys.stderr.write('%s: %s\n' % (PROG, message))
    sys.stderr.flush()


def load_library():
    lib_dir = os.environ.get('DGXSPARK_LIB') or DEFAULT_LIB
    if lib_dir not in sys.path:
        sys.path.insert(0, lib_dir)
    try:
        import roce_gids  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise ResolveError('cannot import roce_gids from %s (installed by the dgxspark.cluster nic role; DGXSPARK_LIB overrides): %s'
                           % (lib_dir, exc))
    return roce_gids


def write_metrics(rails, gid_index, resolved):
    """dgxspark_nccl_gid_index per rail and dgxspark_nccl_gid_resolved, for node exporter's textfile collector.

    Written with the collection's textfile_metrics.py (installed by the metrics role beside roce_gids); without it,
    or without its directory, the metrics are off. A failure to write is logged, never fails the start.
    """
    lib_dir = os.environ.get('DGXSPARK_LIB') or DEFAULT_LIB
    if lib_dir not in sys.path:
        sys.path.insert(0, lib_dir)
    try:
        import textfile_metrics  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    samples = [('dgxspark_nccl_gid_resolved', {}, 1 if resolved else 0)]
    for number, rail in enumerate(rails):
        index = gid_index if gid_index is not None else min(rail['indices'])
        samples.append(('dgxspark_nccl_gid_index', {'rail': str(number), 'device': rail['device'], 'port': str(rail['port']),
                                                    'netdev': rail.get('netdev') or '', 'ipv4': rail['ipv4'],
                                                    'selected_by': 'resolver' if gid_index is not None else 'nccl'}, index))
    try:
        textfile_metrics.write('nccl', samples)
    except (OSError, ValueError) as exc:
        log('could not write the NCCL metrics in %s: %s' % (lib_dir, exc))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=PROG, description='Write the NCCL/host environment file from the live RoCE GID table.')
    parser.add_argument('--fabric-ipv4', action='append', required=True, metavar='IP',
                        help='address of this node on the RoCE fabric; repeat once per rail, primary rail first')
    parser.add_argument('--sysfs-root', default='/sys',
                        help='sysfs root: the port states, and the GID table when show_gids is not found (default: %(default)s)')
    parser.add_argument('--show-gids-cmd', default='show_gids',
                        help='show_gids command (name or path); an empty string reads sysfs directly (default: %(default)s)')
    parser.add_argument('--output', default=DEFAULT_OUTPUT, help='environment file to write, "-" for stdout (default: %(default)s)')
    parser.add_argument('--nccl-gid-auto', action='store_true',
                        help='when the rails share no GID index, let NCCL select it (AF_INET) instead of failing')
    parser.add_argument('--static-env', action='append', default=[], metavar='FILE',
                        help='KEY=value file copied into the output first (the resolved keys win); repeatable')
    parser.add_argument('--roce-version', default='v2', choices=['v1', 'v2'], help='RoCE version of the GID (default: %(default)s)')
    parser.add_argument('--hca', action='append', default=[], metavar='DEV',
                        help='only consider this RDMA device (include list; NCCL\'s ^ exclude form is refused); repeatable')
    parser.add_argument('--socket-ifname', help='socket interface instead of the netdev of the first rail')
    parser.add_argument('--host-ip', metavar='IP',
                        help='VLLM_HOST_IP instead of the first fabric address (the address on --socket-ifname)')
    parser.add_argument('--wait', type=float, default=0.0, metavar='SECONDS',
                        help='keep retrying a failed resolution for up to this long (the fabric coming up after a boot); '
                             '0 = one attempt (default: %(default)s)')
    parser.add_argument('--wait-interval', type=float, default=2.0, metavar='SECONDS',
                        help='pause between attempts while waiting (default: %(default)s)')
    return parser.parse_args(argv)


def read_table(lib, args):
    """Return (source description, entries, parse problems)."""
    command = args.show_gids_cmd.strip()
    path = shutil.which(command) if command else None
    if path:
        env = dict(os.environ, LC_ALL='C', LANG='C')
        try:
            proc = subprocess.run([path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60, check=False,
                                  universal_newlines=True)
        except (OSError, subprocess.SubprocessError) as exc:
            log('%s failed (%s); reading sysfs under %s' % (path, exc, args.sysfs_root))
        else:
            if proc.returncode == 0:
                result = lib.parse_show_gids(proc.stdout)
                if not result.parseable:
                    first = next((line.strip() for line in proc.stdout.splitlines() if line.strip()), '')
                    raise ResolveError('cannot resolve fabric address %s: %s output is unparseable (%d line(s), no GID row, header '
                                       'or n_gids_found trailer; first line: %r)'
                                       % (', '.join(args.fabric_ipv4), path, result.text_lines, first[:120]))
                return path, result.entries, result.problems
            log('%s exited %d (%s); reading sysfs under %s' % (path, proc.returncode, proc.stderr.strip()[:200], args.sysfs_root))
    return 'sysfs %s' % args.sysfs_root, lib.read_sysfs_gids(args.sysfs_root), []


def read_static_env(lib, paths):
    env = {}
    for path in paths:
        try:
            with open(path, 'r') as handle:
                env.update(lib.parse_env_file(handle.read()))
        except (OSError, ValueError) as exc:
            raise ResolveError('cannot read --static-env %s: %s' % (path, exc))
    return env


def remove_stale(path):
    if path == '-':
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        log('could not remove stale %s: %s' % (path, exc))
        return
    log('removed stale %s' % path)


def resolve_once(args):
    lib = load_library()
    static = read_static_env(lib, args.static_env)
    source, entries, problems = read_table(lib, args)
    port_states = lib.read_port_states(args.sysfs_root)
    try:
        resolution = lib.build_nccl_env(entries, args.fabric_ipv4, roce_version=args.roce_version, hca=args.hca,
                                        nccl_gid_auto=args.nccl_gid_auto, socket_ifname=args.socket_ifname,
                                        host_ip=args.host_ip,
                                        port_states=port_states)
    except lib.RoceGidError as exc:
        detail = ' Parser notes: %s' % '; '.join(problems[:5]) if problems else ''
        raise ResolveError('%s (from %s).%s' % (exc.msg, source, detail))
    return lib, static, source, problems, resolution


def run(argv):
    args = parse_args(argv)
    if args.wait < 0 or args.wait_interval <= 0:
        log('--wait must be >= 0 and --wait-interval > 0 (got %s, %s)' % (args.wait, args.wait_interval))
        return 2
    deadline = time.monotonic() + args.wait
    attempt = 0
    while True:
        attempt += 1
        try:
            lib, static, source, problems, resolution = resolve_once(args)
            break
        except ResolveError as exc:
            if time.monotonic() + args.wait_interval > deadline:
                log('FAILED: %s%s' % (exc, ' (after %d attempts in %g s, --wait)' % (attempt, args.wait) if args.wait else ''))
                remove_stale(args.output)
                if args.output != '-':
                    write_metrics([], None, False)
                return EXIT_FAILED
            if attempt == 1:
                # Bounded: the fabric may still be coming up after a boot (link training, addresses, GIDs).
                remove_stale(args.output)
                log('not yet: %s; retrying every %g s for up to %g s' % (exc, args.wait_interval, args.wait))
            time.sleep(args.wait_interval)
    if attempt > 1:
        log('resolved at attempt %d' % attempt)

    resolved = resolution['env']
    managed = set(lib.NCCL_ENV_KEYS) | set(lib.NCCL_AUTO_KEYS)
    overridden = sorted(key for key in static if key in managed and static[key] != resolved.get(key))
    env = dict((key, value) for key, value in static.items() if key not in managed)
    env.update(resolved)
    header = ('Written by %s from %s for %s. Do not edit: rewritten before every start.'
              % (PROG, source, ', '.join(args.fabric_ipv4)))
    content = lib.render_env_file(env, header=header)
    if args.output == '-':
        sys.stdout.write(content)
    else:
        try:
            lib.write_env_file(args.output, content, 0o644)
        except OSError as exc:
            log('FAILED: cannot write %s: %s' % (args.output, exc))
            return EXIT_FAILED
    if args.output != '-':
        write_metrics(resolution['rails'], resolution['gid_index'], True)
    log('%s; wrote %s (from %s)' % (resolution['summary'], 'stdout' if args.output == '-' else args.output, source))
    if overridden:
        log('warning: resolved values replace %s from --static-env' % ', '.join(overridden))
    if problems:
        log('warning: %d parser note(s): %s' % (len(problems), '; '.join(problems[:5])))
    return 0


def main():
    sys.exit(run(sys.argv[1:]))


if __name__ == '__main__':
    main()
