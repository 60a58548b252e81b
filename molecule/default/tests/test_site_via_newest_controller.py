"""The newest controller drives the converged default pair (issue 29).

scripts/controller-newest.sh runs ansible-core of requirements-newest.txt on the Python of the sim's
Debian 13 node image, in a container that shares the host's network and sees this checkout at its own
path, so it reaches the pair over the same ssh settings (key, pinned known_hosts) as the default
controller. After test_site_runner left the pair converged:

- site.yml with the fast path off (every task of every role runs) reports changed=0 on both nodes;
- a plain re-run reports changed=0;
- validate.yml (quick) passes every guard;
- no [DEPRECATION WARNING] of any of these runs points at the collection's own files or plugins
  (fixed, never silenced; others are listed in the summary line, not failed on).

Each step writes its summary line (release, outcome, time) to .cache/controllers/newest-default.txt,
which scripts/test-all.sh prints with its summary (and its output to newest-STEP.log beside it). Runs once
(no testinfra host fixture).
"""

import os
import re
import subprocess
import time

import pytest
import siterun

SCRIPT = os.path.join(siterun.PROJECT, "scripts", "controller-newest.sh")
SUMMARY = os.path.join(siterun.PROJECT, ".cache", "controllers", "newest-default.txt")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.*)\]")
CHANGED = re.compile(r"^changed: \[([^\]]+)\]")
# the collection's own code, as a deprecation names it: a file of this checkout (through the
# playbook-adjacent collections/ link or not) or a plugin/role by its FQCN
OURS = ("dgxspark.cluster", "ansible_collections/dgxspark/cluster", siterun.PROJECT)


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


def check(name, proc, seconds, hosts=siterun.HOSTS):
    """Assert the run passed on HOSTS with no change and no deprecation of ours; write its summary line first
    (and the run's whole output to .cache/controllers/newest-NAME.log)."""
    with open(os.path.join(os.path.dirname(SUMMARY), "newest-%s.log" % name), "w", encoding="utf-8") as handle:
        handle.write(proc.stdout + "\n----- stderr -----\n" + proc.stderr)
    counts = recap(proc)
    changed = changed_tasks(proc)
    deps = deprecations(proc)
    ours = [d for d in deps if any(mark in d for mark in OURS)]
    ok = (proc.returncode == 0 and sorted(counts) == sorted(hosts)
          and all(c[1:] == (0, 0, 0) for c in counts.values()) and not ours)
    summary("%-9s %-6s %4.0fs  %s; deprecation warnings: %d of the collection, %d others"
            % (name, "passed" if ok else "FAILED", seconds,
               ", ".join("%s ok=%d changed=%d" % (h, c[0], c[1]) for h, c in sorted(counts.items())) or "no recap",
               len(ours), len(deps) - len(ours)))
    tail = proc.stdout[-4000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, "%s: exit %d\n%s" % (name, proc.returncode, tail)
    assert sorted(counts) == sorted(hosts), "%s: recap %s\n%s" % (name, counts, tail)
    assert changed == [], "%s changed: %s" % (name, changed)
    assert all(c[1:] == (0, 0, 0) for c in counts.values()), counts
    assert ours == [], "%s: deprecation warnings from the collection's own code:\n%s" % (name, "\n\n".join(ours))


def test_newest_controller_full_run_rerun_and_validate_change_nothing(controller):
    full, seconds = playbook(controller, "site", "-e", '{"preflight_fast_path": false}')
    check("converge", full, seconds)
    # the fast path off: every role's tasks ran (test_site_runner's full run counts > 100 per host)
    assert min(c[0] for c in recap(full).values()) > 100, recap(full)
    again, seconds = playbook(controller, "site")
    check("re-run", again, seconds)
    valid, seconds = playbook(controller, "validate")
    check("validate", valid, seconds, hosts=("spark-head",))   # validate.yml's play runs on the head
    # every guard's verdict line PASS (test_guards.GUARDS: eight at level quick), none FAIL
    assert len(re.findall(r"\bPASS [a-z0-9-]+: ", valid.stdout)) >= 8, valid.stdout[-4000:]
    assert not re.search(r"\bFAIL [a-z0-9-]+: ", valid.stdout), valid.stdout[-4000:]
