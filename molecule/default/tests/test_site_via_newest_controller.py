"""The newest controller drives the default pair after side_effect's reboot (issue 29), and that one full run
is also the scenario's drift check (each cost a full run of its own, about 10 minutes of the gate each).

scripts/controller-newest.sh runs ansible-core of requirements-newest.txt on the Python of the sim's
Debian 13 node image, in a container that shares the host's network and sees this checkout at its own
path, so it reaches the pair over the same ssh settings (key, pinned known_hosts) as the default
controller. After every other test of the rebooted pair (none of them records a fast-path stamp: --tags runs,
check mode and the bad-input rows never do), with drift made first on both nodes:

- site.yml converges in full on every node (the reboot reshuffled the GIDs, so the nic role's stamp no longer
  holds); it names each drift in its fast-path report, repairs exactly that and changes nothing else, and reports
  the worker's failed system-firmware update without touching it;
- a plain re-run takes the fast path with changed=0;
- validate.yml (quick) passes every guard;
- no [DEPRECATION WARNING] of any of these runs points at the collection's own files or plugins
  (fixed, never silenced; others are listed in the summary line, not failed on).

The default controller (ansible-core of requirements.txt) runs molecule's converge and idempotence, the check-mode
run (test_doctor), the tag-limited runs and the bad-input rows (test_site_runner) on the same pair.

Each step writes its summary line (release, outcome, time) to .cache/controllers/newest-default.txt,
which scripts/test-all.sh prints with its summary (and its output to newest-STEP.log beside it). Runs once
(no testinfra host fixture).
"""

import json
import os
import re
import subprocess
import time

import pytest
import siterun

SCRIPT = os.path.join(siterun.PROJECT, "scripts", "controller-newest.sh")
SUMMARY = os.path.join(siterun.PROJECT, ".cache", "controllers", "newest-default.txt")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?:[\w.]+ : )?(.*)\]", re.M)   # the task's name, its role's prefix left off
CHANGED = re.compile(r"^changed: \[([^\]]+)\]")
# a result: one line, or indented over several for a debug task (its _ansible_verbose_always)
RESULT = re.compile(r"^(?:ok|changed): \[([^\]]+)\] => (?=\{)", re.M)
# the collection's own code, as a deprecation names it: a file of this checkout (through the
# playbook-adjacent collections/ link or not) or a plugin/role by its FQCN
OURS = ("dgxspark.cluster", "ansible_collections/dgxspark/cluster", siterun.PROJECT)

# (host, what to break, what the fast-path report must name, the task that must repair it)
DRIFT = [
    ("spark-worker", "sudo rm -f /etc/dgxspark/nccl-static.env",
     "path:/etc/dgxspark/nccl-static.env: was file", "Write the static NCCL settings the resolver merges in"),
    ("spark-head", "sudo chmod 0600 /etc/apt/apt.conf.d/51dgxspark-nvidia-driver",
     "path:/etc/apt/apt.conf.d/51dgxspark-nvidia-driver: was file 0644", "Keep unattended-upgrades away from the NVIDIA driver, CUDA and the kernel flavour"),
    # earlyoom back (an admin, a package's postinst): it kills vLLM under deep context, so the fast path must see it
    ("spark-worker", "sudo systemctl unmask earlyoom.service && sudo systemctl start earlyoom.service",
     "unit:earlyoom.service: was masked inactive", "Stop, disable and mask earlyoom (preflight_earlyoom is disable)"),
]

# the sim's default ESRT entry (sim/node/usr/lib/spark-sim/sparksim/firmware.py) one version down, its update failed
ESRT_FAILED = {"fw_class": "5370a4c5-0000-4000-8000-00000000e5a7", "fw_type": 1, "fw_version": 65538,
               "lowest_supported_fw_version": 65536, "capsule_flags": 0x8010, "last_attempt_version": 65540,
               "last_attempt_status": 6}
FIRMWARE_REPORT = "Report a system firmware difference between the nodes, or an update that did not apply (never updated here)"


def summary(line):
    os.makedirs(os.path.dirname(SUMMARY), exist_ok=True)
    with open(SUMMARY, "a", encoding="utf-8") as handle:
        handle.write("controller newest: %s\n" % line)


@pytest.fixture(scope="module")
def controller():
    """The image tag and 'ansible-core X, Python Y' (the image is built here if the controllers gate did not)."""
    proc = subprocess.run([SCRIPT, "image"], capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = dict(os.environ, CONTROLLER_NEWEST_IMAGE=proc.stdout.strip().splitlines()[-1])
    versions = subprocess.run([SCRIPT, "versions"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert versions.returncode == 0, versions.stderr[-3000:]
    os.makedirs(os.path.dirname(SUMMARY), exist_ok=True)
    with open(SUMMARY, "w", encoding="utf-8") as handle:
        handle.write("controller newest: %s, against the molecule default pair\n" % versions.stdout.strip())
    return env


def playbook(env, name, *args):
    """ansible-playbook NAME.yml on the scenario inventory from the newest controller: (proc, seconds)."""
    cmd = [SCRIPT, "run", "env", "ANSIBLE_CONFIG=" + os.path.join(siterun.PROJECT, "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH=" + os.path.join(siterun.PROJECT, "collections"),
           "SPARK_SIM_DIR=" + siterun.SIM_DIR, "ANSIBLE_NOCOLOR=1", "ANSIBLE_FORCE_COLOR=0",
           "ANSIBLE_CALLBACK_RESULT_FORMAT=json",   # each result on one line: results() reads them back
           "ansible-playbook", "-i", siterun.INVENTORY, os.path.join(siterun.PROJECT, name + ".yml"), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=siterun.PROJECT, timeout=2400, check=False)
    return proc, time.monotonic() - start


def recap(proc):
    """{host: (ok, changed, unreachable, failed)} from the PLAY RECAP."""
    return {m.group(1): tuple(int(m.group(i)) for i in range(2, 6)) for m in RECAP.finditer(proc.stdout)}


def changed_tasks(proc):
    """'host: task' of every task or handler the default callback reported changed."""
    out, task = [], None
    for line in proc.stdout.splitlines():
        header = TASK.match(line)
        if header:
            task = header.group(1)
            continue
        hit = CHANGED.match(line)
        if hit:
            out.append("%s: %s" % (hit.group(1), task))
    return out


def results(proc, task):
    """{host: result} of each host's (non-loop) result of TASK, as the JSON result format printed it."""
    out = {}
    decoder = json.JSONDecoder()
    headers = [(m.start(), m.group(1)) for m in TASK.finditer(proc.stdout)]
    for hit in RESULT.finditer(proc.stdout):
        current = [name for start, name in headers if start < hit.start()][-1:]
        if current == [task]:
            out[hit.group(1)] = decoder.raw_decode(proc.stdout, hit.end())[0]
    return out


def deprecations(proc):
    """Every [DEPRECATION WARNING] block of the run (its line and what follows up to the next message or task)."""
    lines = (proc.stdout + "\n" + proc.stderr).splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if "[DEPRECATION WARNING]" not in line:
            continue
        block = [line]
        for nxt in lines[i + 1:i + 16]:
            if nxt.startswith(("[", "TASK [", "PLAY [", "PLAY RECAP", "RUNNING HANDLER", "ok: ", "changed: ", "skipping: ")):
                break
            block.append(nxt)
        blocks.append("\n".join(block).strip())
    return blocks


def check(name, proc, seconds, hosts=siterun.HOSTS, expect_changed=()):
    """Assert the run passed on HOSTS, changed exactly EXPECT_CHANGED ('host: task', nothing by default) and had no
    deprecation of ours; write its summary line first (and the run's whole output to .cache/controllers/newest-NAME.log)."""
    with open(os.path.join(os.path.dirname(SUMMARY), "newest-%s.log" % name), "w", encoding="utf-8") as handle:
        handle.write(proc.stdout + "\n----- stderr -----\n" + proc.stderr)
    counts = recap(proc)
    changed = changed_tasks(proc)
    deps = deprecations(proc)
    ours = [d for d in deps if any(mark in d for mark in OURS)]
    want = sorted(set(expect_changed))
    ok = (proc.returncode == 0 and sorted(counts) == sorted(hosts) and sorted(set(changed)) == want
          and all(c[2:] == (0, 0) for c in counts.values()) and not ours)
    summary("%-9s %-6s %4.0fs  %s; deprecation warnings: %d of the collection, %d others"
            % (name, "passed" if ok else "FAILED", seconds,
               ", ".join("%s ok=%d changed=%d" % (h, c[0], c[1]) for h, c in sorted(counts.items())) or "no recap",
               len(ours), len(deps) - len(ours)))
    tail = proc.stdout[-4000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, "%s: exit %d\n%s" % (name, proc.returncode, tail)
    assert sorted(counts) == sorted(hosts), "%s: recap %s\n%s" % (name, counts, tail)
    assert sorted(set(changed)) == want, "%s changed more (or less) than %s: %s" % (name, want, changed)
    assert all(c[2:] == (0, 0) for c in counts.values()), counts
    if not want:
        assert all(c[1] == 0 for c in counts.values()), counts
    assert ours == [], "%s: deprecation warnings from the collection's own code:\n%s" % (name, "\n\n".join(ours))


def test_newest_controller_repairs_exactly_the_drift_after_the_reboot_then_reruns_and_validates(controller):
    for host, command, _, _ in DRIFT:
        proc = siterun.ssh(host, command)
        assert proc.returncode == 0, proc.stderr
    # the worker came back on other system firmware, and a capsule update that did not apply (fwupdmgr's path): the
    # run reports it (issue 25) and changes nothing for it; the collection never updates firmware
    siterun.spark_sim("state", "spark-worker", "--set", "firmware.esrt=%s" % json.dumps([ESRT_FAILED]))
    try:
        full, seconds = playbook(controller, "site")
    finally:
        siterun.spark_sim("state", "spark-worker", "--set", "firmware.esrt=null")
    check("converge", full, seconds, expect_changed=["%s: %s" % (host, task) for host, _, _, task in DRIFT])
    report = [r.get("msg", "") for r in results(full, FIRMWARE_REPORT).values()]
    assert len(report) == 1 and report[0].startswith(
        "spark-worker: the last firmware update of system firmware (%s) did not apply: AC power too low "
        "(ESRT last_attempt_status 6, version 65540 attempted, 65538 running); spark-worker has system firmware 65538 "
        "(%s), spark-head has system firmware 65539." % (ESRT_FAILED["fw_class"], ESRT_FAILED["fw_class"])), report
    reports = {host: r.get("msg", "") for host, r in results(full, siterun.FAST_PATH_REPORT).items()}
    assert sorted(reports) == list(siterun.HOSTS), reports
    assert all(": full run: " in msg for msg in reports.values()), reports
    assert any("nic: " in msg for msg in reports.values()), reports
    for host, _, named, _ in DRIFT:
        assert named in reports[host], reports
    # every role's tasks ran (a full run counts > 100 per host, the fast path fewer than 40)
    assert min(c[0] for c in recap(full).values()) > 100, recap(full)

    again, seconds = playbook(controller, "site")
    check("re-run", again, seconds)
    assert results(again, FIRMWARE_REPORT) == {}, "a firmware report on nodes that agree"
    reports = {host: r.get("msg", "") for host, r in results(again, siterun.FAST_PATH_REPORT).items()}
    assert len(reports) == 2 and all("nothing drifted on any node" in msg for msg in reports.values()), reports
    assert max(c[0] for c in recap(again).values()) < 40, recap(again)

    valid, seconds = playbook(controller, "validate")
    check("validate", valid, seconds, hosts=("spark-head",))   # validate.yml's play runs on the head
    # every guard's verdict line PASS (test_guards.GUARDS: eight at level quick), none FAIL
    assert len(re.findall(r"\bPASS [a-z0-9-]+: ", valid.stdout)) >= 8, valid.stdout[-4000:]
    assert not re.search(r"\bFAIL [a-z0-9-]+: ", valid.stdout), valid.stdout[-4000:]
