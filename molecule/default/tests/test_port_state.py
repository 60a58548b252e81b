"""A pulled cable on a rail: its port goes DOWN while the GIDs and the static address stay (the kernel removes
a GID only with its address or netdev). NCCL does not use a port that is not ACTIVE, so neither may the node's
resolver: it fails closed naming the port and its state, where before it wrote the dead device into
NCCL_IB_HCA. The sim's stand-in tree (nic_sysfs_root) holds the port's state file; `spark-sim state` flips it
the way the real link does, leaving the GID table as it is.

Runs once, on the worker through ssh, and leaves the pair as it found it (the port ACTIVE again, the resolver
writing the same environment as before).
"""

import os
import subprocess

import siterun

DEVICE, NETDEV = "rocep1s0f1", "enp1s0f1np1"
STATE_FILE = "/var/lib/spark-sim/sys/class/infiniband/%s/ports/1/state" % DEVICE
RESOLVE = "sudo /usr/local/sbin/dgxspark-nccl-env --wait 0 --output -"


def _sim_state(host, setting):
    proc = subprocess.run([os.path.join(siterun.PROJECT, "sim", "spark-sim"), "-i", siterun.INVENTORY, "state", host,
                           "--set", setting], capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, SPARK_SIM_DIR=siterun.SIM_DIR))
    assert proc.returncode == 0, proc.stderr


def _env(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_a_rail_port_that_is_down_is_no_candidate_and_the_resolver_fails_closed_naming_it():
    healthy = siterun.ssh("spark-worker", RESOLVE)
    assert healthy.returncode == 0, healthy.stderr
    env = _env(healthy.stdout)
    assert DEVICE in env["NCCL_IB_HCA"], env
    try:
        _sim_state("spark-worker", "hcas.%s.ports.0.port_state=\"DOWN\"" % DEVICE)  # PATH=JSON
        port = siterun.ssh("spark-worker", "cat %s" % STATE_FILE)
        assert port.returncode == 0 and port.stdout == "1: DOWN\n", (port.stdout, port.stderr)
        address = siterun.ssh("spark-worker", "ip -4 -o addr show dev %s" % NETDEV)
        assert "192.168.110.2/" in address.stdout, "the address must stay on the netdev: %s" % address.stdout
        gids = [line for line in siterun.ssh("spark-worker", "/usr/sbin/show_gids").stdout.splitlines()
                if line.startswith(DEVICE + "\t") and "192.168.110.2" in line]
        assert any("v2" in line for line in gids), "the RoCE v2 GID must stay on the DOWN port: %s" % gids
        down = siterun.ssh("spark-worker", RESOLVE)
        assert down.returncode != 0, "the resolver took a DOWN port: %s" % down.stdout
        assert "NCCL_IB_HCA" not in down.stdout, down.stdout
        assert "%s port 1" % DEVICE in down.stderr and "state DOWN" in down.stderr, down.stderr
        assert "192.168.110.2" in down.stderr, down.stderr
    finally:
        _sim_state("spark-worker", "hcas.%s.ports.0.port_state=\"ACTIVE\"" % DEVICE)
    again = siterun.ssh("spark-worker", RESOLVE)
    assert again.returncode == 0, again.stderr
    assert _env(again.stdout) == env
