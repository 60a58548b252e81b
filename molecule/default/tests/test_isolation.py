"""The sim's nodes reach nothing outside the sim: every network spark-sim made for this pair is a docker
internal network (docker drops what a node sends beyond the host's bridge), and each node is on those
networks only. So every scenario that converges proves that nothing the roles run on a node (apt, pip,
hf download, docker) needs the package index or any outside address: it would fail, not fetch."""

import json
import subprocess

import siterun


def _docker(*args):
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_network_of_the_pair_is_internal_and_the_nodes_are_on_no_other():
    networks = {net["Name"]: net for net in _docker("network", "inspect", "%s-mgmt" % siterun.SIM_NAME,
                                                    "%s-fabric0" % siterun.SIM_NAME, "%s-fabric1" % siterun.SIM_NAME)}
    assert len(networks) == 3, sorted(networks)
    assert all(net["Internal"] is True for net in networks.values()), {n: v["Internal"] for n, v in networks.items()}
    for host in siterun.HOSTS:
        info = _docker("container", "inspect", siterun.container(host))[0]
        attached = set(info["NetworkSettings"]["Networks"])
        assert attached == set(networks), "%s is on %s" % (host, sorted(attached))
        assert info["HostConfig"]["NetworkMode"] == "%s-mgmt" % siterun.SIM_NAME, info["HostConfig"]["NetworkMode"]
