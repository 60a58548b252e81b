# -*- coding: utf-8 -*-
"""The fast path's claims (README, docs/architecture.md), each with a test.

Pure functions (module_utils/converged.py): which variables count in the inputs digest, which runs are
complete, and the drift a removed package, a stopped unit and a head that stops answering make. Then
preflight's own tasks (roles/preflight/tasks/fastpath.yml) through ansible-playbook on two local hosts,
stamps in tmp_path: preflight_fast_path false runs in full and does not change the inputs, a --skip-tags
naming a role (or --tags, or check mode) turns the fast path off, a changed variable or inventory forces
a full run, and a run after `-e '{"preflight_fast_path": false}'` names the real drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.module_utils import converged as cv

REPO = Path(__file__).resolve().parents[4]
ROLES = ["nic", "driver", "cuda", "clock_cap", "checkpoint", "runtime", "service", "preflight"]


# --------------------------------------------------------------------------- which variables are inputs

def test_the_path_switches_are_no_input():
    names = ["clock_cap_max_mhz", "preflight_fast_path", "preflight_fast_path_roles", "preflight_site_inputs",
             "preflight_site_record", "dgxspark_fabric_rails", "preflight_min_free_disk_gb"]
    assert cv.site_input_names(names) == ["clock_cap_max_mhz", "dgxspark_fabric_rails", "preflight_min_free_disk_gb"]


def test_a_run_with_the_fast_path_off_digests_the_same_inputs():
    def inputs(variables):
        names = cv.site_input_names(variables)
        return cv.digest({name: variables[name] for name in names})
    base = {"clock_cap_max_mhz": 2100, "preflight_fast_path": True, "preflight_fast_path_roles": ["nic"]}
    assert inputs(base) == inputs(dict(base, preflight_fast_path=False))
    assert inputs(base) == inputs(dict(base, preflight_fast_path_roles=["clock_cap"]))
    assert inputs(base) != inputs(dict(base, clock_cap_max_mhz=2000))  # a changed variable is a new input


# --------------------------------------------------------------------------- complete runs

@pytest.mark.parametrize("run_tags, skip_tags, check_mode, complete", [
    (["all"], [], False, True),
    (["all"], ["molecule-notest", "notest"], False, True),   # molecule's skip tags leave every task in
    (["all"], ["service"], False, False),                    # a role
    (["all"], ["clock_cap_verify"], False, False),           # one of its tags
    (["all"], ["preflight_fast_path"], False, False),
    (["all"], ["always"], False, False),
    (["all"], ["servicex"], False, True),                    # not a role's tag
    (["nic"], [], False, False),                             # --tags
    (["all", "nic"], [], False, False),
    (["all"], [], True, False),                              # check mode
])
def test_complete_run(run_tags, skip_tags, check_mode, complete):
    assert cv.complete_run(run_tags, skip_tags, ROLES, check_mode) is complete


# --------------------------------------------------------------------------- drift the fast path must see

class Node:
    """run_command of a node whose packages, units and head check a test changes."""

    def __init__(self):
        self.packages = {"nvidia-driver-580-open": "580.173.02-1ubuntu1\thold ok installed"}
        self.units = {"dgxspark-vllm.service": ("enabled", "active"), "dgxspark-clock-cap.service": ("enabled", "active")}
        self.check_rc = 0

    def __call__(self, argv):
        if argv[0] == "dpkg-query":
            names = argv[4:]
            return 0, "".join("%s:arm64\t%s\n" % (n, self.packages[n]) for n in names if n in self.packages), ""
        if argv[0] == "systemctl":
            units = argv[argv.index("--") + 1:]
            return 0, "\n\n".join("ActiveState=%s\nUnitFileState=%s\nId=%s" % (self.units[u][1], self.units[u][0], u)
                                  for u in units), ""
        if argv[:2] == ["python3", "/usr/local/lib/dgxspark/dgxspark_vllm_check.py"]:
            return self.check_rc, "", "" if self.check_rc == 0 else "connection refused"
        raise AssertionError(argv)


RESOURCES = {
    "packages": ["nvidia-driver-580-open"],
    "units": ["dgxspark-vllm.service", "dgxspark-clock-cap.service"],
    "commands": [{"argv": ["python3", "/usr/local/lib/dgxspark/dgxspark_vllm_check.py", "--url", "http://127.0.0.1:8000"],
                  "compare": "rc"}],
}


@pytest.mark.parametrize("break_it, named", [
    (lambda node: node.packages.pop("nvidia-driver-580-open"),
     "package:nvidia-driver-580-open: was 580.173.02-1ubuntu1 hold ok installed, now absent"),
    (lambda node: node.units.update({"dgxspark-vllm.service": ("enabled", "inactive")}),
     "unit:dgxspark-vllm.service: was enabled active, now enabled inactive"),
    (lambda node: node.units.update({"dgxspark-clock-cap.service": ("enabled", "failed")}),
     "unit:dgxspark-clock-cap.service: was enabled active, now enabled failed"),
    (lambda node: setattr(node, "check_rc", 1),
     "command:python3 /usr/local/lib/dgxspark/dgxspark_vllm_check.py --url http://127.0.0.1:8000: was rc:0, now rc:1"),
], ids=["package-removed", "unit-stopped", "cap-failed-at-boot", "head-stops-answering"])
def test_drift_is_named(break_it, named):
    node = Node()
    stamp = cv.make_stamp("service", "inputs", RESOURCES, cv.snapshot(RESOURCES, node))
    assert cv.check_stamp(stamp, "service", "inputs", node) == (True, [])
    break_it(node)
    converged, why = cv.check_stamp(stamp, "service", "inputs", node)
    assert not converged
    assert why == ["service: " + named]


# --------------------------------------------------------------------------- preflight's tasks, for real

PLAYBOOK = textwrap.dedent("""\
    - name: Preflight's fast path, then a role that records when the run is complete
      hosts: spark
      gather_facts: false
      module_defaults:
        dgxspark.cluster.converged:
          path: "{{ out }}/stamps/{{ inventory_hostname }}"
      tasks:
        - name: Preflight's fast path
          ansible.builtin.include_role:
            name: dgxspark.cluster.preflight
            tasks_from: fastpath.yml
        - name: A role's stamp (what a complete run left)
          dgxspark.cluster.converged:
            roles: [clock_cap]
            inputs: "{{ preflight_site_inputs }}"
            state: record
            resources:
              paths: ["{{ out }}/managed-{{ inventory_hostname }}.conf"]
          when: preflight_site_record | bool and not preflight_site_converged | bool
        - name: Write what preflight decided
          ansible.builtin.copy:
            dest: "{{ out }}/{{ inventory_hostname }}.json"
            content: "{{ {'converged': preflight_site_converged | bool, 'record': preflight_site_record | bool,
                          'drift': __preflight_stamps.drift | default(None)} | to_json }}"
            mode: "0600"
          check_mode: false
    """)


def _inventory(path, worker_ip="192.168.99.2"):
    hosts = {"spark-head": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": "192.168.99.1"}]},
             "spark-worker": {"dgxspark_fabric_rails": [{"netdev": "enp1s0f1np1", "ipv4": worker_ip}]}}
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "clock_cap_max_mhz": 2100, "preflight_fast_path_roles": ["clock_cap"]},
        "children": {"spark": {"children": {"spark_head": {"hosts": {"spark-head": hosts["spark-head"]}},
                                            "spark_workers": {"hosts": {"spark-worker": hosts["spark-worker"]}}}}}}}))
    return path


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    for host in ("spark-head", "spark-worker"):
        (tmp_path / ("managed-%s.conf" % host)).write_text("k=v\n")
    inventory = _inventory(tmp_path / "hosts.yml")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))

    def run(*args, inventory=inventory):
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                               str(tmp_path / "play.yml"), "-e", json.dumps({"out": str(tmp_path)}), *args],
                              capture_output=True, text=True, env=env, cwd=str(REPO), timeout=180, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return {host: json.loads((tmp_path / ("%s.json" % host)).read_text()) for host in ("spark-head", "spark-worker")}
    run.tmp_path = tmp_path
    return run


@pytest.mark.integration
def test_preflight_fast_path_claims(pair):
    first = pair()
    assert [r["converged"] for r in first.values()] == [False, False]
    assert "no stamp" in first["spark-head"]["drift"][0]
    assert all(r["converged"] for r in pair().values())  # nothing drifted: the fast path

    # preflight_fast_path false: a full run that still records, with the same inputs
    off = pair("-e", '{"preflight_fast_path": false}')
    assert [(r["converged"], r["record"], r["drift"]) for r in off.values()] == [(False, True, None)] * 2
    assert all(r["converged"] for r in pair().values()), "the switch counted as an input"

    # after a run with the fast path off, drift on a node is named as drift, not as changed inputs
    pair("-e", '{"preflight_fast_path": false}')
    (pair.tmp_path / "managed-spark-worker.conf").write_text("k=changed behind the run's back\n")
    named = pair()
    assert not named["spark-worker"]["converged"]
    assert named["spark-worker"]["drift"] == [
        "clock_cap: path:%s/managed-spark-worker.conf: was file" % pair.tmp_path
        + named["spark-worker"]["drift"][0].split(": was file", 1)[1]]
    assert "inputs changed" not in " ".join(named["spark-worker"]["drift"])

    # a --skip-tags naming a role (or one of its tags), --tags, check mode: no fast path, no record
    # (the other tag forms: test_complete_run)
    for args in (["--skip-tags", "clock_cap"], ["--check"]):
        result = pair(*args)
        assert [(r["converged"], r["record"]) for r in result.values()] == [(False, False)] * 2, args
    assert all(r["converged"] for r in pair("--skip-tags", "molecule-notest,notest").values())

    # a changed variable, a changed inventory: the inputs changed, a full run
    changed = pair("-e", '{"clock_cap_max_mhz": 2000}')
    assert all("inputs changed" in r["drift"][0] for r in changed.values())
    moved = pair("-e", '{"clock_cap_max_mhz": 2000}', inventory=_inventory(pair.tmp_path / "moved.yml", "192.168.99.3"))
    assert all("inputs changed" in r["drift"][0] for r in moved.values())
