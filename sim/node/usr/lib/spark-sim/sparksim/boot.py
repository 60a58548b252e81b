"""What a power-on does to a spark-sim node, and the node's first state.

``init_state`` is called on the docker host by sim/spark-sim when it creates a
node; ``main`` runs inside the node at every boot (spark-sim-boot.service).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from typing import Any

from . import gpu, kernel, rdma, state as statefile

BOOT_ID_PATH = "/run/spark-sim/boot_id"
DEFAULT_ROUTE_PATH = "/run/spark-sim/default-route"   # the default route a management link took down with it
# The Spark's RJ45 port (Realtek, PCIe domain 7): the name DGX OS gives the management link. Docker names a
# container's links eth0, eth1, ... in the order it attaches its networks, which is not the order they were
# connected and can change at every start; the boot gives the management link its real, stable name.
MANAGEMENT_NETDEV = "enP7s7"


def init_state(hostname: str, rails: list[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state of a node that was just unpacked, before its first boot.

    ``rails`` lists the cabled rails: ``[{"netdev": "enp1s0f1np1", "ipv4": "192.168.100.1",
    "gid_index_v2": 3}]``. ``options`` carries the sim knobs from the inventory
    (reshuffle_gids, seed, cables_seated, driver_version).
    """
    options = options or {}
    gpu_state = gpu.default_gpu(hostname)
    if options.get("driver_version"):
        gpu_state["driver_version"] = options["driver_version"]
    return {
        "version": 1,
        "hostname": hostname,
        "boot": {
            "count": 0,
            "reshuffle_gids": bool(options.get("reshuffle_gids", False)),
            "seed": int(options.get("seed", 0)),
        },
        "cables_seated": bool(options.get("cables_seated", True)),
        "faults": {},
        "nic": {"throttled": False, "throttle_persists": False},
        "sysfs_root": statefile.DEFAULT_SYSFS_ROOT,
        "hcas": rdma.default_hcas(hostname, rails),
        "gpu": gpu_state,
    }


def apply_power_on(state: dict[str, Any]) -> list[str]:
    """Advance the boot counter and apply a reboot's effects (not on the first boot)."""
    boot_info = state.setdefault("boot", {})
    boot_info["count"] = int(boot_info.get("count", 0)) + 1
    if boot_info["count"] == 1:
        return ["first boot: hardware state as created"]
    rng = random.Random("%s-%s-%s" % (state.get("hostname"), boot_info.get("seed", 0), boot_info["count"]))
    return rdma.apply_boot(state, rng) + gpu.apply_boot(state) + gpu.apply_driver_install(state)


def _ip_json(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-j", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out or "[]")


def configure_links(state: dict[str, Any]) -> list[str]:
    """Rename each fabric interface (found by its IPv4) to its ConnectX netdev name; set carrier."""
    lines = []
    by_ip = {}
    for link in _ip_json("-4", "addr", "show"):
        for addr in link.get("addr_info", []):
            by_ip[addr.get("local")] = link["ifname"]
    for hca in state.get("hcas", []):
        for port in hca.get("ports", []):
            netdev = port.get("netdev")
            ipv4s = [pair[0] for pair in rdma.ipv4_pairs_of(port.get("gids", []))]
            current = next((by_ip[ip] for ip in ipv4s if ip in by_ip), None)
            ipv4 = ", ".join(ipv4s)
            if not current or not netdev:
                continue
            if current != netdev:
                subprocess.run(["ip", "link", "set", "dev", current, "down"], check=True)
                subprocess.run(["ip", "link", "set", "dev", current, "name", netdev], check=True)
                lines.append("renamed %s to %s (%s)" % (current, netdev, ipv4))
            updown = "up" if port.get("state") == "up" else "down"
            subprocess.run(["ip", "link", "set", "dev", netdev, updown], check=True)
    return lines


def _fabric_ipv4s(state: dict[str, Any]) -> set[str]:
    return {ip for hca in state.get("hcas", []) for port in hca.get("ports", [])
            for ip, _v1, _v2 in rdma.ipv4_pairs_of(port.get("gids", []))}


def name_management_link(state: dict[str, Any]) -> list[str]:
    """Rename the management link (the one link with an IPv4 that is no fabric rail's) to MANAGEMENT_NETDEV,
    keeping its routes. Nothing is renamed when there is no such link or more than one."""
    fabric = _fabric_ipv4s(state)
    links = [link for link in _ip_json("-4", "addr", "show")
             if link.get("ifname") != "lo" and link.get("addr_info")
             and not any(a.get("local") in fabric for a in link.get("addr_info", []))]
    if len(links) != 1 or links[0]["ifname"] == MANAGEMENT_NETDEV:
        return []
    current = links[0]["ifname"]
    routes = subprocess.run(["ip", "route", "show", "dev", current], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    subprocess.run(["ip", "link", "set", "dev", current, "down"], check=True)
    subprocess.run(["ip", "link", "set", "dev", current, "name", MANAGEMENT_NETDEV], check=True)
    subprocess.run(["ip", "link", "set", "dev", MANAGEMENT_NETDEV, "up"], check=True)
    for route in routes:
        if route.strip() and " proto kernel " not in " %s " % route:
            subprocess.run(["ip", "route", "replace", *route.split(), "dev", MANAGEMENT_NETDEV], check=True)
    addrs = ", ".join(a.get("local", "") for a in links[0].get("addr_info", []))
    return ["renamed %s to %s (%s, the management link)" % (current, MANAGEMENT_NETDEV, addrs)]


def management_down(state: dict[str, Any]) -> list[str]:
    """The fault no-network-after-reboot: after a reboot (not the first boot) the management network does not come
    back (every link with an IPv4 that is not a fabric rail's stays down) until the operator's power cycle
    (`spark-sim fault HOST clear` brings it up). A field report: after fwupdmgr, a node rebooted by Ansible came back
    without network until its power was pulled."""
    if not (state.get("faults") or {}).get("no_network_after_reboot") or int(state.get("boot", {}).get("count", 0)) <= 1:
        return []
    fabric = _fabric_ipv4s(state)
    lines = []
    default = subprocess.run(["ip", "route", "show", "default"], check=False, capture_output=True, text=True).stdout
    if default.strip():   # the power cycle (spark-sim fault HOST clear) puts it back with the link
        os.makedirs(os.path.dirname(DEFAULT_ROUTE_PATH), exist_ok=True)
        with open(DEFAULT_ROUTE_PATH, "w", encoding="utf-8") as handle:
            handle.write(default.splitlines()[0].strip() + "\n")
    for link in _ip_json("-4", "addr", "show"):
        name = link.get("ifname")
        addrs = [a.get("local") for a in link.get("addr_info", [])]
        if name == "lo" or not addrs or any(a in fabric for a in addrs):
            continue
        subprocess.run(["ip", "link", "set", "dev", name, "down"], check=True)
        lines.append("management network %s (%s) did not come back (fault no-network-after-reboot)" % (name, ", ".join(addrs)))
    return lines


def write_boot_id(path: str = BOOT_ID_PATH) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    boot_id = str(uuid.uuid4())
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(boot_id + "\n")
    return boot_id


def ensure_host_keys() -> None:
    if not os.path.exists("/etc/ssh/ssh_host_ed25519_key"):
        subprocess.run(["ssh-keygen", "-A"], check=True, capture_output=True)


def main() -> int:
    boot_id = write_boot_id()
    print("spark-sim: boot id %s" % boot_id)
    ensure_host_keys()
    try:
        state = statefile.load()
    except FileNotFoundError:
        print("spark-sim: no state file at %s: no simulated hardware on this node" % statefile.state_path())
        return 0
    for line in apply_power_on(state):
        print("spark-sim: %s" % line)
    statefile.save(state)
    kernel.write_running(state)
    print("spark-sim: kernel %s, command line: %s" % (kernel.running_release(state), kernel.write_cmdline(state)))
    for line in configure_links(state) + name_management_link(state) + management_down(state):
        print("spark-sim: %s" % line)
    rdma.write_sysfs(state, statefile.sysfs_root(state))
    print("spark-sim: boot %d done" % state["boot"]["count"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
