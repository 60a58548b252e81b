"""The GID index matters: with a stale NCCL_IB_GID_INDEX forced on the worker, its rank dies at the
rendezvous the way NCCL does (seed 003: "unhandled system error" at init) and the head never serves;
without it, both serve again.

The stale index is the worker's pre-reboot one (spark_sim_gid_index_v2 in the inventory: the reboot in
side_effect moved the GIDs away from it). It is forced with an extra EnvironmentFile in a unit drop-in,
loaded after /run/dgxspark/nccl.env, so it overrides what the resolver wrote at this start. The vLLM
stand-in reads the node's live sysfs tree (/var/lib/spark-sim/sys) at the rendezvous, as NCCL does at
communicator init. Runs once (no testinfra host fixture), on both nodes through ssh, and leaves the pair
as it found it: serving, no drop-in.
"""

import os
import time

import yaml

import siterun

DROPIN_DIR = "/etc/systemd/system/dgxspark-vllm.service.d"
DROPIN = DROPIN_DIR + "/zz-test-stale-gid.conf"
STALE_ENV = "/etc/dgxspark/zz-test-stale-gid.env"
CHECK = ("sudo python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8888"
         " --served-model-name deepseek-v4-flash-0731 --secret-env-file /etc/dgxspark/vllm-secret.env"
         " --timeout 3 --completion-timeout 10")


def _inventory():
    with open(os.path.join(siterun.INVENTORY, "hosts.yml"), encoding="utf-8") as handle:
        inv = yaml.safe_load(handle)
    groups = inv["all"]["children"]["spark"]["children"]
    return groups["spark_workers"]["hosts"]["spark-worker"]


def _ok(host, command):
    proc = siterun.ssh(host, command)
    assert proc.returncode == 0, "%s: %s\n%s%s" % (host, command, proc.stdout, proc.stderr)
    return proc.stdout


def _head_serves():
    return siterun.ssh("spark-head", CHECK).returncode == 0


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    raise AssertionError("not within %d s: %s" % (timeout, what))


def _journal_since(host, cursor_file):
    return _ok(host, "sudo journalctl -q -o cat -u dgxspark-vllm --after-cursor=\"$(cat %s)\"" % cursor_file)


def _mark_journal(host, cursor_file):
    _ok(host, "sudo journalctl -n 1 --show-cursor -o cat -u dgxspark-vllm | sed -n 's/^-- cursor: //p' > %s && test -s %s"
        % (cursor_file, cursor_file))


def _restart_both():
    """As roles/service does: the worker first, then the head (reset-failed: the start limit may have been hit)."""
    for host in ("spark-worker", "spark-head"):
        _ok(host, "sudo systemctl reset-failed dgxspark-vllm; sudo systemctl restart dgxspark-vllm")


def test_a_stale_gid_index_on_the_worker_fails_its_rank_and_the_head_then_both_serve_again():
    worker = _inventory()
    stale = worker["spark_sim_gid_index_v2"]
    rail = worker["dgxspark_fabric_rails"][0]
    _wait(_head_serves, 120, "the head serves before the test")
    live = _ok("spark-worker", "cat /run/dgxspark/nccl.env")
    assert "VLLM_HOST_IP=%s" % rail["ipv4"] in live.splitlines(), live
    assert "NCCL_IB_GID_INDEX=%d" % stale not in live.splitlines(), "the reboot did not move the worker's GID:\n" + live
    assert _ok("spark-worker", "test -e %s && echo present || echo absent" % DROPIN).strip() == "absent"

    _mark_journal("spark-worker", "/tmp/stale-gid.cursor")
    try:
        _ok("spark-worker", "printf 'NCCL_IB_GID_INDEX=%d\\n' | sudo tee %s >/dev/null && sudo mkdir -p %s && "
            "printf '[Service]\\nEnvironmentFile=%s\\n' | sudo tee %s >/dev/null && sudo systemctl daemon-reload"
            % (stale, STALE_ENV, DROPIN_DIR, STALE_ENV, DROPIN))
        _restart_both()

        def worker_failed_at_rendezvous():
            log = _journal_since("spark-worker", "/tmp/stale-gid.cursor")
            return "unhandled system error" in log
        _wait(worker_failed_at_rendezvous, 120, "the worker's rank fails with NCCL's error")
        log = _journal_since("spark-worker", "/tmp/stale-gid.cursor")
        assert "Joined the head" in log, log                         # at the rendezvous, not before
        assert "NCCL WARN NET/IB" in log and "stale or wrong for this node" in log, log
        assert "status=1/FAILURE" in log, log                       # the rank exited non-zero
        assert "Node rank 1 ready" not in log, log
        # the resolver still wrote the live index: the drop-in is what made it stale
        assert "NCCL_IB_GID_INDEX=%d" % stale not in _ok("spark-worker", "cat /run/dgxspark/nccl.env").splitlines()
        # the head never becomes ready without it
        for _ in range(3):
            proc = siterun.ssh("spark-head", CHECK)
            assert proc.returncode != 0, "the head served with a worker that cannot init NCCL:\n" + proc.stdout
            time.sleep(3)
    finally:
        _ok("spark-worker", "sudo rm -f %s %s && (sudo rmdir %s 2>/dev/null || true) && sudo systemctl daemon-reload"
            % (DROPIN, STALE_ENV, DROPIN_DIR))

    # stop the failing rank first (systemd restarts it on failure): the lines after the mark are the new start's
    _ok("spark-worker", "sudo systemctl stop dgxspark-vllm")
    _mark_journal("spark-worker", "/tmp/stale-gid.cursor")
    _restart_both()
    _wait(_head_serves, 180, "the head serves again without the drop-in")
    log = _journal_since("spark-worker", "/tmp/stale-gid.cursor")
    assert "Node rank 1 ready" in log, log
    assert "NCCL WARN" not in log, log
