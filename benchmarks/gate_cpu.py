# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the test gate's CPU time goes: run scripts/test-all.sh (or the command given) and count CPU seconds per
molecule lane and static gate (the controller's side: cgroup v1 cpuacct groups the gate script joins when
GATE_CPUACCT is set), per docker container (the sim's nodes, the newest controller: docker's own cpuacct groups,
read every few seconds while they live), and of the whole machine (/proc/stat).

The gate is CPU-bound on the two cores of a CI machine: its wall time follows the CPU seconds of its parts, so this
is the measure that says which part to cut. Needs root and cgroup v1 (/sys/fs/cgroup/cpuacct).

Usage: python3 benchmarks/gate_cpu.py [--interval S] [--out FILE] [-- COMMAND ...]
       (default command: scripts/test-all.sh; the table also goes to FILE, default .cache/gate-cpu.txt)
"""

import argparse
import os
import subprocess
import sys
import threading
import time

CPUACCT = "/sys/fs/cgroup/cpuacct"
DOCKER = os.path.join(CPUACCT, "docker")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def read_int(path):
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def machine_ticks():
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def docker_usages():
    """{container id: CPU ns of its current boot} of every group docker keeps (running or stopped containers)."""
    usages = {}
    for cid in os.listdir(DOCKER) if os.path.isdir(DOCKER) else []:
        usage = read_int(os.path.join(DOCKER, cid, "cpuacct.usage"))
        if usage is not None:
            usages[cid] = usage
    return usages


def container_names():
    proc = subprocess.run(["docker", "ps", "--no-trunc", "--format", "{{.ID}} {{.Names}} {{.Image}}"],
                          capture_output=True, text=True, check=False)
    names = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            names[parts[0]] = parts[1] if not parts[2].startswith("dgxspark-controller-newest") else \
                "controller-newest:" + parts[1]
    return names


class Sampler(threading.Thread):
    def __init__(self, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self.containers = {}   # id -> [name, ns of earlier boots, ns of this boot]
        self.baseline = docker_usages()  # before the command (docker keeps the groups of stopped containers)
        self.stop = threading.Event()

    def sample(self):
        names = container_names()
        for cid, usage in docker_usages().items():
            # [name, CPU ns of the boots before this one, CPU ns of this boot]: a restart (the sim's reboot) keeps the
            # container's id but starts its group again from 0
            entry = self.containers.setdefault(cid, [names.get(cid, cid[:12]), -self.baseline.get(cid, 0), 0])
            if cid in names:
                entry[0] = names[cid]
            if usage < entry[2]:
                entry[1] += entry[2]
            entry[2] = usage

    def run(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)
        self.sample()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--out", default=os.path.join(REPO, ".cache", "gate-cpu.txt"))
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(CPUACCT, "cpuacct.usage")):
        sys.exit("gate_cpu: no cgroup v1 cpuacct at %s" % CPUACCT)
    group_root = os.path.join(CPUACCT, "gate-cpu-%d" % os.getpid())
    os.makedirs(group_root)
    sampler = Sampler(args.interval)
    sampler.start()
    busy0, total0 = machine_ticks()
    start = time.time()
    env = dict(os.environ, GATE_CPUACCT=group_root)
    command = args.command or [os.path.join(REPO, "scripts", "test-all.sh")]
    procs = os.path.join(group_root, "cgroup.procs")

    def join_group():
        with open(procs, "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
    rc = subprocess.call(command, env=env, cwd=REPO, preexec_fn=join_group)  # pylint: disable=subprocess-popen-preexec-fn
    wall = time.time() - start
    busy1, total1 = machine_ticks()
    sampler.stop.set()
    sampler.join()
    rows = []
    for name in sorted(os.listdir(group_root)):
        path = os.path.join(group_root, name)
        if os.path.isdir(path):
            rows.append(("controller " + name, (read_int(os.path.join(path, "cpuacct.usage")) or 0) / 1e9))
    rest = (read_int(os.path.join(group_root, "cpuacct.usage")) or 0) / 1e9 - sum(r[1] for r in rows)
    rows.append(("controller (the gate script itself)", rest))
    for name, before, usage in sorted(sampler.containers.values()):
        if before + usage > 0:
            rows.append(("container " + name, (before + usage) / 1e9))
    hz = os.sysconf("SC_CLK_TCK")
    cpus = os.cpu_count() or 1
    lines = ["%-60s %8.0f" % (name, seconds) for name, seconds in sorted(rows, key=lambda r: -r[1])]
    lines.append("%-60s %8.0f" % ("counted above", sum(r[1] for r in rows)))
    lines.append("%-60s %8.0f" % ("the machine, busy (/proc/stat)", (busy1 - busy0) / hz))
    lines.append("wall %.0f s, %d CPUs: the machine was busy %.0f%% of the time; command exit %d"
                 % (wall, cpus, 100.0 * (busy1 - busy0) / max(1, total1 - total0), rc))
    text = "\n".join(lines) + "\n"
    sys.stdout.write("\n===== CPU seconds =====\n" + text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(text)
    for name in os.listdir(group_root):
        path = os.path.join(group_root, name)
        if os.path.isdir(path):
            try:
                os.rmdir(path)
            except OSError:
                pass
    try:
        os.rmdir(group_root)
    except OSError:
        pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
