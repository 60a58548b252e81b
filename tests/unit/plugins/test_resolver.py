# -*- coding: utf-8 -*-
"""roles/nic/files/dgxspark_nccl_resolve.py run as a subprocess against sysfs trees in tmp_path.

The resolver imports roce_gids from DGXSPARK_LIB (here: the collection's plugins/module_utils),
as it does on a node from /usr/local/lib/dgxspark.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import roce_gids as rg
from ansible_collections.dgxspark.cluster.plugins.module_utils import textfile_metrics as tm
from captures import capture as real_capture

REPO_ROOT = Path(__file__).resolve().parents[3]
RESOLVER = REPO_ROOT / 'roles' / 'nic' / 'files' / 'dgxspark_nccl_resolve.py'
LIB_DIR = REPO_ROOT / 'plugins' / 'module_utils'

LL0 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03da'
LL1 = 'fe80:0000:0000:0000:0ac0:ebff:fe21:03db'
IP0, IP1 = '192.168.100.10', '192.168.101.10'


def mapped(ipv4):
    a, b, c, d = (int(x) for x in ipv4.split('.'))
    return '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' % (a, b, c, d)


def spark_rows(index0=3, index1=3, v2=True):
    rows = [
        ('rocep1s0f0', 1, 0, LL0, 'IB/RoCE v1', 'enp1s0f0np0'),
        ('rocep1s0f0', 1, 1, LL0, 'RoCE v2', 'enp1s0f0np0'),
        ('rocep1s0f0', 1, index0 - 1, mapped(IP0), 'IB/RoCE v1', 'enp1s0f0np0'),
        ('roceP2p1s0f0', 1, 0, LL1, 'IB/RoCE v1', 'enP2p1s0f0np0'),
        ('roceP2p1s0f0', 1, 1, LL1, 'RoCE v2', 'enP2p1s0f0np0'),
        ('roceP2p1s0f0', 1, index1 - 1, mapped(IP1), 'IB/RoCE v1', 'enP2p1s0f0np0'),
        ('rocep1s0f0', 1, 60, '0000:0000:0000:0000:0000:0000:0000:0000', None, None),  # empty slot
    ]
    if v2:
        rows += [('rocep1s0f0', 1, index0, mapped(IP0), 'RoCE v2', 'enp1s0f0np0'),
                 ('roceP2p1s0f0', 1, index1, mapped(IP1), 'RoCE v2', 'enP2p1s0f0np0')]
    return rows


def make_sysfs(root, rows):
    for device, port, index, gid, gid_type, ndev in rows:
        port_dir = root / 'class' / 'infiniband' / device / 'ports' / str(port)
        for sub in ('gids', 'gid_attrs/types', 'gid_attrs/ndevs'):
            (port_dir / sub).mkdir(parents=True, exist_ok=True)
        (port_dir / 'gids' / str(index)).write_text(gid + '\n')
        if gid_type is not None:
            (port_dir / 'gid_attrs' / 'types' / str(index)).write_text(gid_type + '\n')
        if ndev is not None:
            (port_dir / 'gid_attrs' / 'ndevs' / str(index)).write_text(ndev + '\n')
    return root


def resolve(tmp_path, *args, show_gids_cmd='', env=None):
    """Run the resolver; by default with --show-gids-cmd '' so a show_gids on this machine is never used."""
    run_env = dict(os.environ, DGXSPARK_LIB=str(LIB_DIR))
    run_env.update(env or {})
    cmd = [sys.executable, str(RESOLVER), '--show-gids-cmd', show_gids_cmd] + [str(a) for a in args]
    return subprocess.run(cmd, cwd=str(tmp_path), env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=False)


def read_env(path):
    return rg.parse_env_file(path.read_text())


def test_single_rail_writes_env_file(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(index0=5))
    out = tmp_path / 'run' / 'dgxspark' / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', out)
    assert proc.returncode == 0, proc.stderr
    assert read_env(out) == {
        'NCCL_IB_HCA': '=rocep1s0f0',
        'NCCL_IB_GID_INDEX': '5',
        'NCCL_SOCKET_IFNAME': '=enp1s0f0np0',
        'GLOO_SOCKET_IFNAME': 'enp1s0f0np0',
        'TP_SOCKET_IFNAME': 'enp1s0f0np0',
        'VLLM_HOST_IP': IP0,
    }
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in out.parent.iterdir()) == ['nccl.env']  # no temp file left behind
    log = proc.stderr.strip().splitlines()
    assert len(log) == 1
    assert 'GID index 5' in log[0] and 'rocep1s0f0' in log[0] and str(out) in log[0]
    # systemd EnvironmentFile syntax: comments and KEY=value lines only
    for line in out.read_text().splitlines():
        assert line.startswith('#') or ('=' in line and line.split('=', 1)[0].isidentifier())


def test_two_rails_common_index(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows())
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--fabric-ipv4', IP1, '--sysfs-root', sysfs, '--output', out)
    assert proc.returncode == 0, proc.stderr
    env = read_env(out)
    assert env['NCCL_IB_HCA'] == '=rocep1s0f0,roceP2p1s0f0'
    assert env['NCCL_IB_GID_INDEX'] == '3'
    assert env['VLLM_HOST_IP'] == IP0


def test_rewrites_after_drift(tmp_path):
    out = tmp_path / 'nccl.env'
    sysfs = make_sysfs(tmp_path / 'sys-a', spark_rows(index0=3))
    assert resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', out).returncode == 0
    assert read_env(out)['NCCL_IB_GID_INDEX'] == '3'
    sysfs = make_sysfs(tmp_path / 'sys-b', spark_rows(index0=4))
    assert resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', out).returncode == 0
    assert read_env(out)['NCCL_IB_GID_INDEX'] == '4'


@pytest.mark.parametrize('rows, fabric, fragments', [
    pytest.param(spark_rows(), ['10.9.9.9'], ['10.9.9.9', 'no GID carries this address', 'ibdev2netdev', IP0], id='absent'),
    pytest.param(spark_rows(v2=False), [IP0], [IP0, 'exists only as RoCE v1', 'rocep1s0f0'], id='v1-only'),
    pytest.param(spark_rows(3, 5), [IP0, IP1], [IP0, IP1, 'no common RoCE v2 GID index', 'index 5'], id='no-common-index'),
    pytest.param([], [IP0], [IP0, 'no GIDs at all'], id='no-rdma-device'),
])
def test_fails_closed(tmp_path, rows, fabric, fragments):
    sysfs = make_sysfs(tmp_path / 'sys', rows)
    (sysfs / 'class' / 'infiniband').mkdir(parents=True, exist_ok=True)
    out = tmp_path / 'nccl.env'
    out.write_text('NCCL_IB_GID_INDEX=3\n')  # stale file from an earlier boot
    args = []
    for address in fabric:
        args += ['--fabric-ipv4', address]
    proc = resolve(tmp_path, *args, '--sysfs-root', sysfs, '--output', out)
    assert proc.returncode == 1
    assert 'FAILED' in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    assert 'Traceback' not in proc.stderr
    assert not out.exists(), 'a stale environment file must not survive a failed resolution'


def test_nccl_gid_auto(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(3, 5))
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', IP0 + '/16', '--fabric-ipv4', IP1 + '/16', '--nccl-gid-auto',
                   '--sysfs-root', sysfs, '--output', out)
    assert proc.returncode == 0, proc.stderr
    env = read_env(out)
    assert 'NCCL_IB_GID_INDEX' not in env
    assert env['NCCL_IB_ADDR_FAMILY'] == 'AF_INET'
    assert env['NCCL_IB_ROCE_VERSION_NUM'] == '2'
    assert env['NCCL_IB_ADDR_RANGE'] == '192.168.0.0/16'
    assert 'NCCL selects' in proc.stderr


def test_static_env_is_merged_and_cannot_pin_the_index(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(3, 5))
    static = tmp_path / 'static.env'
    static.write_text('# recipe\nNCCL_NET=IB\nNCCL_IB_DISABLE=0\nNCCL_IB_GID_INDEX=3\nHF_HUB_OFFLINE="1"\n')
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--fabric-ipv4', IP1, '--nccl-gid-auto', '--static-env', static,
                   '--sysfs-root', sysfs, '--output', out)
    assert proc.returncode == 0, proc.stderr
    env = read_env(out)
    assert env['NCCL_NET'] == 'IB' and env['NCCL_IB_DISABLE'] == '0' and env['HF_HUB_OFFLINE'] == '1'
    assert 'NCCL_IB_GID_INDEX' not in env
    assert 'replace NCCL_IB_GID_INDEX from --static-env' in proc.stderr


def test_bad_static_env_fails(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows())
    static = tmp_path / 'static.env'
    static.write_text('this is not an env file\n')
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--static-env', static, '--sysfs-root', sysfs, '--output', tmp_path / 'o.env')
    assert proc.returncode == 1
    assert 'static.env' in proc.stderr and 'line 1' in proc.stderr


def fake_show_gids(tmp_path, body, rc=0):
    script = tmp_path / 'bin' / 'show_gids'
    script.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / 'bin' / 'output.txt').write_bytes(body.encode('utf-8'))
    script.write_text('#!/bin/sh\n[ "$LC_ALL" = C ] || exit 9\ncat "%s"\nexit %d\n' % (tmp_path / 'bin' / 'output.txt', rc))
    script.chmod(0o755)
    return script


def test_uses_show_gids_when_found(tmp_path):
    body = real_capture('show_gids', '06-bnxt-vlan-multivendor-email-wrapped.txt').read_bytes().decode('utf-8').split('\n\n', 1)[1]
    script = fake_show_gids(tmp_path, body)
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', '172.31.43.187', '--output', out, '--sysfs-root', tmp_path / 'nothing',
                   show_gids_cmd='show_gids', env={'PATH': '%s%s%s' % (script.parent, os.pathsep, os.environ.get('PATH', ''))})
    assert proc.returncode == 0, proc.stderr
    env = read_env(out)
    assert env['NCCL_IB_GID_INDEX'] == '11'
    assert env['NCCL_IB_HCA'] == '=bnxt_re0'
    assert env['GLOO_SOCKET_IFNAME'] == 'bnxt_roce.43'
    assert str(script) in proc.stderr


def test_failing_show_gids_falls_back_to_sysfs(tmp_path):
    script = fake_show_gids(tmp_path, 'oops\n', rc=3)
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(index0=9))
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', out, show_gids_cmd=str(script))
    assert proc.returncode == 0, proc.stderr
    assert read_env(out)['NCCL_IB_GID_INDEX'] == '9'
    assert 'exited 3' in proc.stderr


def test_unparseable_show_gids_fails_closed(tmp_path):
    script = fake_show_gids(tmp_path, 'Segmentation fault\n')
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--output', tmp_path / 'o.env', show_gids_cmd=str(script))
    assert proc.returncode == 1
    assert IP0 in proc.stderr and 'unparseable' in proc.stderr


def test_output_to_stdout(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows())
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', '-')
    assert proc.returncode == 0, proc.stderr
    assert rg.parse_env_file(proc.stdout)['NCCL_IB_GID_INDEX'] == '3'


def test_missing_library_fails_closed(tmp_path):
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--output', tmp_path / 'o.env', env={'DGXSPARK_LIB': str(tmp_path / 'nowhere')})
    assert proc.returncode == 1
    assert 'cannot import roce_gids' in proc.stderr


def test_usage_error(tmp_path):
    proc = resolve(tmp_path, '--output', tmp_path / 'o.env')
    assert proc.returncode == 2
    assert '--fabric-ipv4' in proc.stderr


def test_resolver_runs_under_the_python_the_unit_names(tmp_path):
    """The unit runs it as `<interpreter> <path>` (roles/nic/templates/dgxspark-nccl-env.j2): no shebang, no exec bit,
    no venv. Run that interpreter, isolated (-I: no site packages, no PYTHONPATH), on a copy without the exec bit,
    through a real resolution."""
    template = (REPO_ROOT / 'roles' / 'nic' / 'templates' / 'dgxspark-nccl-env.j2').read_text()
    exec_line = next(line for line in template.splitlines() if line.startswith('exec '))
    interpreter = exec_line.split()[1]
    assert exec_line.rstrip(' \\').endswith('/dgxspark_nccl_resolve.py'), exec_line
    assert interpreter == '/usr/bin/python3', exec_line  # the node's system Python, never a venv
    assert os.access(interpreter, os.X_OK), '%s is not on this machine' % interpreter
    copy = tmp_path / 'lib' / 'dgxspark_nccl_resolve.py'
    copy.parent.mkdir()
    copy.write_bytes(RESOLVER.read_bytes())
    copy.chmod(0o644)
    (copy.parent / 'roce_gids.py').write_bytes((LIB_DIR / 'roce_gids.py').read_bytes())
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(index0=7, index1=7))
    env = {'PATH': '/usr/bin:/bin', 'DGXSPARK_LIB': str(copy.parent)}
    proc = subprocess.run([interpreter, '-I', str(copy), '--show-gids-cmd', '', '--fabric-ipv4', IP0, '--sysfs-root', str(sysfs),
                           '--output', '-'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert rg.parse_env_file(proc.stdout)['NCCL_IB_GID_INDEX'] == '7'
    assert 'GID index 7' in proc.stderr


# ---------------------------------------------------------------------------- --wait: the fabric comes up late

def test_wait_retries_until_the_fabric_comes_up(tmp_path):
    """The address's GID appears only after a few seconds (the link training after a boot): one run succeeds."""
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(index0=5, v2=False))
    out = tmp_path / 'nccl.env'
    out.write_text('NCCL_IB_GID_INDEX=3\n')  # stale, from the last boot
    late = make_sysfs(tmp_path / 'late', spark_rows(index0=5))
    cmd = [sys.executable, str(RESOLVER), '--show-gids-cmd', '', '--fabric-ipv4', IP0, '--sysfs-root', str(sysfs),
           '--output', str(out), '--wait', '20', '--wait-interval', '0.2']
    proc = subprocess.Popen(cmd, env=dict(os.environ, DGXSPARK_LIB=str(LIB_DIR)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    try:
        deadline = time.monotonic() + 10
        while out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not out.exists(), 'the stale file is removed at the first failed attempt'
        assert proc.poll() is None, 'still waiting for the fabric'
        # The v2 GID of the address appears.
        (sysfs / 'class').rename(tmp_path / 'old-class')
        (late / 'class').rename(sysfs / 'class')
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert read_env(out)['NCCL_IB_GID_INDEX'] == '5'
    assert 'not yet: ' in err and 'retrying every 0.2 s for up to 20 s' in err
    assert re.search(r'resolved at attempt ([2-9]|\d\d+)', err)
    assert 'FAILED' not in err


def test_wait_is_bounded(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(v2=False))
    start = time.monotonic()
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', tmp_path / 'nccl.env',
                   '--wait', '1.5', '--wait-interval', '0.3')
    took = time.monotonic() - start
    assert proc.returncode == 1
    assert re.search(r'FAILED: .*exists only as RoCE v1.*\(after [3-6] attempts in 1\.5 s, --wait\)', proc.stderr), proc.stderr
    assert 1.0 < took < 10


def test_wait_zero_is_one_attempt(tmp_path):
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(v2=False))
    proc = resolve(tmp_path, '--fabric-ipv4', IP0, '--sysfs-root', sysfs, '--output', tmp_path / 'nccl.env')
    assert proc.returncode == 1 and 'not yet' not in proc.stderr and 'attempts' not in proc.stderr
    bad = resolve(tmp_path, '--fabric-ipv4', IP0, '--wait', '-1')
    assert bad.returncode == 2 and '--wait must be >= 0' in bad.stderr


def test_the_resolver_writes_each_rails_gid_index_for_node_exporter(tmp_path):
    """dgxspark_nccl_gid_index per rail and dgxspark_nccl_gid_resolved (textfile_metrics beside roce_gids)."""
    sysfs = make_sysfs(tmp_path / 'sys', spark_rows(index0=3, index1=3))
    metrics = tmp_path / 'metrics'
    metrics.mkdir()
    out = tmp_path / 'nccl.env'
    proc = resolve(tmp_path, '--fabric-ipv4', '192.168.100.10', '--fabric-ipv4', '192.168.101.10', '--sysfs-root', sysfs,
                   '--output', out, env={'DGXSPARK_METRICS_DIR': str(metrics)})
    assert proc.returncode == 0, proc.stderr
    page = tm.read((metrics / 'nccl.prom').read_text())
    assert ('dgxspark_nccl_gid_resolved', {}, 1.0) in page
    rails = sorted((labels['rail'], labels['ipv4'], value) for name, labels, value in page if name == 'dgxspark_nccl_gid_index')
    assert rails == [('0', '192.168.100.10', 3.0), ('1', '192.168.101.10', 3.0)]
    proc = resolve(tmp_path, '--fabric-ipv4', '192.168.199.10', '--sysfs-root', sysfs, '--output', out,
                   env={'DGXSPARK_METRICS_DIR': str(metrics)})
    assert proc.returncode == 1
    assert tm.read((metrics / 'nccl.prom').read_text()) == [('dgxspark_nccl_gid_resolved', {}, 0.0)]
