"""The serving watchdog on the head and stop.yml, on the service scenario's pair (after test_service.py).

The watchdog's timer is off on the sim inventories (its ticks would race the hang cases of side_effect.yml); this
file starts it with the scenario's short windows (inventory: interval 5 s, stall 20 s, probe 10 s, 1 restart in
service_start_limit_interval_sec) and drives the stand-in's faults:

1. `wedge` with a request in: the head's rank restarted within stall + one interval, the journal says why (the
   counters, the head rank's log, the workers it cannot reach), the worker followed, the pair serves again, the
   restart counted in the state file;
2. `slow-prefill` (~50k tokens at 940 tok/s, ~53 s, over twice the window): no restart, the request answers;
3. `wedge` again: the bound (1 restart) holds - reported, not restarted;
4. the configuration the role renders from service_watchdog_restart=false: reported, not restarted;
5. stop.yml: both units inactive (the head first), still enabled, the memory check passed on both; with
   stop_disable the units are disabled; with the units stopped doctor.yml measures the NCCL all-reduce (issue 26:
   the runtime's entry point on both nodes at once, as the units run): nccl-allreduce PASSes on both nodes at the
   healthy busbw; with the worker's power-delivery fault (nccl-power-degraded) it FAILs on both ranks at ~3.2 GB/s
   while fabric-bandwidth (raw RDMA) still PASSes, and nothing changed; site.yml (tags runtime,service) serves
   again and a second run (the metrics play too: molecule's idempotence takes the fast path here) changes nothing.

The tests run in file order and share the pair; none takes the `host` fixture (each runs once).
"""

import base64
import json
import os
import re
import sys
import time

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair import HEAD, INVENTORY, PROJECT, UNIT, WORKER, out, root  # noqa: E402 pylint: disable=wrong-import-position
from pair import run as _run, changed as _changed, ok_msgs as _ok_msgs, failures as _failures  # noqa: E402,F401
from pair import spark_sim  # noqa: E402 pylint: disable=wrong-import-position

TIMER = "dgxspark-vllm-watchdog.timer"
WATCHDOG = "dgxspark-vllm-watchdog.service"
CONFIG = "/etc/dgxspark/vllm-watchdog.json"
STATE = "/var/lib/dgxspark/watchdog/state.json"
CHECK = "/usr/local/lib/dgxspark/dgxspark_vllm_check.py"
CLIENT = "/root/watchdog-client.py"

sys.path.insert(0, os.path.join(PROJECT, "plugins", "module_utils"))
import textfile_metrics  # noqa: E402 pylint: disable=wrong-import-position

with open(os.path.join(INVENTORY, "group_vars", "spark", "service.yml"), encoding="utf-8") as _handle:
    VARS = yaml.safe_load(_handle)
STALL, INTERVAL = VARS["service_watchdog_stall_sec"], VARS["service_watchdog_interval"]
PREFILL_TOKENS = 50000            # ~53 s at the slow-prefill fault's 940 tokens/s: more than twice the window

# A client on the head: one completion with the key from the secret environment file (never argv), its result as JSON.
CLIENT_SOURCE = r'''
import json, sys, time, urllib.request
conf = json.load(open(sys.argv[1]))
words, max_tokens, timeout, out = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
key = ''
for line in open(conf['secret_env_file']):
    k, _, v = line.strip().partition('=')
    if k == 'VLLM_API_KEY':
        key = v.strip().strip('"').strip("'")
body = json.dumps({'model': conf['served_model_name'], 'prompt': ' '.join(['word'] * words), 'max_tokens': max_tokens}).encode()
req = urllib.request.Request(conf['url'] + '/v1/completions', data=body, method='POST',
                             headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key})
start = time.monotonic()
try:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=timeout) as resp:
        result = {'ok': True, 'usage': json.loads(resp.read().decode()).get('usage')}
except Exception as exc:
    result = {'ok': False, 'error': str(exc)}
result['seconds'] = time.monotonic() - start
open(out, 'w').write(json.dumps(result))
'''


def main_pid(host):
    return int(out(host, "systemctl show -p MainPID --value %s" % UNIT).strip())


def journal_since(since):
    return out(HEAD, "journalctl -u %s --since @%d --no-pager -o cat" % (WATCHDOG, since))


def state():
    return json.loads(out(HEAD, "cat %s" % STATE))


def serves(timeout=120):
    """The head answers /v1/models and a 1-token completion + chat completion (the role's own check)."""
    conf = json.loads(out(HEAD, "cat %s" % CONFIG))
    end = time.monotonic() + timeout
    while True:
        proc = root(HEAD, "python3 %s --url %s --served-model-name %s --secret-env-file %s --completion-timeout 10"
                    % (CHECK, conf["url"], conf["served_model_name"], conf["secret_env_file"]))
        if proc.returncode == 0 or time.monotonic() > end:
            return proc
        time.sleep(3)


def client(words, max_tokens, timeout, name):
    """A completion sent from the head in the background; its result lands in /root/<name>.json."""
    path = "/root/%s.json" % name
    root(HEAD, "rm -f %s" % path)
    proc = root(HEAD, "setsid timeout %d python3 %s %s %d %d %d %s >/dev/null 2>&1 < /dev/null &"
                % (timeout + 5, CLIENT, CONFIG, words, max_tokens, timeout, path))
    assert proc.returncode == 0, proc.stderr
    return path


def wait_for(predicate, timeout, step=1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def fresh_pair():
    """Both start-limit counters reset (every restart of this file counts against the burst), the faults cleared."""
    spark_sim("fault", HEAD, "clear")
    for host in (HEAD, WORKER):
        root(host, "systemctl reset-failed %s" % UNIT)


def test_00_the_watchdog_is_installed_on_the_head_only():
    conf = json.loads(out(HEAD, "cat %s" % CONFIG))
    assert (conf["stall_sec"], conf["interval_sec"], conf["max_restarts"], conf["restart"]) == (STALL, INTERVAL, 1, True)
    assert conf["window_sec"] == VARS["service_start_limit_interval_sec"]
    assert [[host, int(rank)] for host, rank in conf["workers"]] == [[WORKER, 1]]
    assert "sim-key" not in json.dumps(conf)                                   # the key stays in the secret file
    shipped = out(HEAD, "cat /usr/local/lib/dgxspark/vllm_metrics.py")
    with open(os.path.join(PROJECT, "plugins", "module_utils", "vllm_metrics.py"), encoding="utf-8") as handle:
        assert shipped == handle.read()                                        # the collection's parser, one source
    assert out(HEAD, "stat -c '%U %a' /var/lib/dgxspark/watchdog").split() == ["root", "700"]
    assert "OnUnitActiveSec=%d" % INTERVAL in out(HEAD, "cat /etc/systemd/system/%s" % TIMER)
    assert out(HEAD, "systemctl is-enabled %s || true" % TIMER).strip() == "disabled"   # the sim inventories keep it off
    assert root(WORKER, "test -e %s" % CONFIG).returncode == 1
    encoded = base64.b64encode(CLIENT_SOURCE.encode()).decode()
    out(HEAD, "echo %s | base64 -d > %s" % (encoded, CLIENT))
    fresh_pair()
    assert serves().returncode == 0
    out(HEAD, "rm -f %s && systemctl start %s" % (STATE, TIMER))
    assert wait_for(lambda: root(HEAD, "test -s %s" % STATE).returncode == 0, 3 * INTERVAL)


def test_01_a_wedge_restarts_the_ranks_within_the_window():
    head_pid, worker_pid = main_pid(HEAD), main_pid(WORKER)
    since = int(out(HEAD, "date +%s"))
    spark_sim("fault", HEAD, "wedge")
    t0 = time.monotonic()
    client(1, 4, 120, "wedged")
    assert wait_for(lambda: main_pid(HEAD) != head_pid, STALL + INTERVAL + 20), journal_since(since)
    took = time.monotonic() - t0
    log = journal_since(since)
    assert took <= STALL + INTERVAL + 15, (took, log)                        # from the controller: ssh and load add up
    still = [int(n) for n in re.findall(r"WEDGED: requests are in .*?: nothing moved for (\d+) s", log)]
    assert all(n <= STALL + INTERVAL + 2 for n in still), log                  # the watchdog's own clock: one tick late at most
    # the stall (the request in, nothing moved) or, when a tick fell between the fault and the request, the idle probe
    assert re.search(r"WEDGED: (requests are in and nothing moved since \S+|/health answers 200 but the 1-token completion "
                     r"got no answer within \d+ s \(probe sent \S+; nothing moved meanwhile)"
                     r": running \d, waiting 0, prompt_tokens_total \d+, generation_tokens_total \d+, kv_cache_usage_perc [0-9.]+: "
                     r"nothing moved for \d+ s \(service_watchdog_stall_sec %d\)" % STALL, log), log
    assert "head rank log | " in log
    assert "worker node rank 1 (spark-worker): its unit and log are not readable from the head" in log
    assert "restarting the ranks" in log and "restarted %s at" % UNIT in log
    assert serves().returncode == 0                                            # the pair serves again
    assert main_pid(WORKER) != worker_pid                                      # the worker followed its head
    counts = state()["counts"]
    assert counts["restarts"] == 1 and counts["wedges"] == 1, counts
    assert watchdog_metrics() == {"stalls": 1.0, "restarts": 1.0, "not_restarted": 0.0}   # a metric counts it


def watchdog_metrics():
    """The watchdog's counters as node exporter's textfile collector reads them on the head (its watchdog.prom)."""
    page = textfile_metrics.read(out(HEAD, "cat /var/lib/dgxspark/metrics/watchdog.prom"))
    return {key[len("dgxspark_watchdog_"):-len("_total")]: value for key, labels, value in page
            if key.startswith("dgxspark_watchdog_") and key.endswith("_total")}


def test_02_a_slow_prefill_over_the_window_is_left_alone():
    spark_sim("fault", HEAD, "clear")
    time.sleep(1)
    spark_sim("fault", HEAD, "slow-prefill")
    head_pid = main_pid(HEAD)
    since = int(out(HEAD, "date +%s"))
    path = client(PREFILL_TOKENS, 2, 150, "slow")
    result = wait_for(lambda: root(HEAD, "cat %s" % path).stdout.strip(), 150, step=3)
    result = json.loads(result)
    log = journal_since(since)
    assert result["ok"] and result["usage"]["prompt_tokens"] == PREFILL_TOKENS, result
    assert result["seconds"] > 2 * STALL, result                               # longer than the stall window
    assert main_pid(HEAD) == head_pid, log
    assert "WEDGED" not in log and "progress: running 1" in log, log
    assert state()["counts"]["restarts"] == 1


def test_03_the_restart_bound_holds():
    spark_sim("fault", HEAD, "clear")
    time.sleep(1)
    spark_sim("fault", HEAD, "wedge")
    head_pid = main_pid(HEAD)
    since = int(out(HEAD, "date +%s"))
    client(1, 4, 120, "bound")
    bound = "not restarted: the bound is reached, 1 restarts in the last %d s" % VARS["service_start_limit_interval_sec"]
    assert wait_for(lambda: bound in journal_since(since), STALL + 3 * INTERVAL), journal_since(since)
    time.sleep(INTERVAL)
    assert main_pid(HEAD) == head_pid
    counts = state()["counts"]
    assert counts["restarts"] == 1 and counts["not_restarted"] == 1, counts
    assert watchdog_metrics() == {"stalls": 2.0, "restarts": 1.0, "not_restarted": 1.0}


def test_04_restart_false_reports_only():
    # what the role renders for service_watchdog_restart: false (the last test converges it back to true)
    out(HEAD, "python3 -c \"import json; p='%s'; c=json.load(open(p)); c['restart']=False; "
              "open(p,'w').write(json.dumps(c))\"" % CONFIG)
    fresh_pair()
    out(HEAD, "systemctl restart %s" % UNIT)                                   # the operator clears the wedge
    assert serves().returncode == 0
    spark_sim("fault", HEAD, "wedge")
    head_pid = main_pid(HEAD)
    since = int(out(HEAD, "date +%s"))
    client(1, 4, 120, "report")
    line = "not restarted: service_watchdog_restart is false (reported only)"
    assert wait_for(lambda: line in journal_since(since), STALL + 3 * INTERVAL), journal_since(since)
    assert "WEDGED: " in journal_since(since)
    assert main_pid(HEAD) == head_pid
    out(HEAD, "systemctl stop %s" % TIMER)
    fresh_pair()
    out(HEAD, "systemctl restart %s" % UNIT)
    assert serves().returncode == 0


def _doctor(tmp_path, name, extravars):
    """doctor.yml at the full level; (runner, its JSON report)."""
    reports = tmp_path / ("doctor-" + name)
    runner = _run(tmp_path, os.path.join(PROJECT, "doctor.yml"),
                  dict({"doctor_level": "full", "doctor_report_dir": str(reports)}, **extravars))
    assert _changed(runner) == [], _changed(runner)
    found = sorted(reports.glob("*_doctor_full.json"))
    assert len(found) == 1, (found, _failures(runner))
    return runner, json.loads(found[0].read_text())


def _verdicts(report, check):
    return {r["host"]: r for r in report["results"] if r["check"] == check}


def _doctor_measures_the_all_reduce_with_the_units_stopped(tmp_path):
    runner, report = _doctor(tmp_path, "healthy", {"doctor_checks": ["nccl", "gpu"]})
    nccl = _verdicts(report, "nccl-allreduce")
    assert sorted(nccl) == [HEAD, WORKER], report["results"]
    for rank, host in enumerate((HEAD, WORKER)):
        assert nccl[host]["status"] == "PASS", nccl[host]
        figure = float(re.search(r"busbw ([0-9.]+) GB/s", nccl[host]["evidence"]).group(1))
        assert 15 <= figure <= 23.2, nccl[host]       # the stand-in's healthy 23.19 GB/s, read back by the formula
        assert nccl[host]["evidence"].startswith("rank %d of 2: 1024 MiB x 20, " % rank), nccl[host]
    assert {h: r["status"] for h, r in _verdicts(report, "gpu-cuinit").items()} == {HEAD: "PASS", WORKER: "PASS"}
    assert runner.rc == 0, _failures(runner)
    spark_sim("fault", WORKER, "nccl-power-degraded")
    try:
        runner, report = _doctor(tmp_path, "power", {"doctor_checks": ["fabric", "nccl"]})
    finally:
        spark_sim("state", WORKER, "--set", "nic.power_degraded=false")
    nccl = _verdicts(report, "nccl-allreduce")
    for host in (HEAD, WORKER):      # the collective runs at the slow node's pace: both ranks read it
        assert nccl[host]["status"] == "FAIL", nccl[host]
        figure = float(re.search(r"busbw ([0-9.]+) GB/s", nccl[host]["evidence"]).group(1))
        assert 2.5 <= figure <= 3.23 and "below the floor 15 GB/s" in nccl[host]["evidence"], nccl[host]
        assert nccl[host]["remedy"].startswith("Reboot both nodes with the cables seated"), nccl[host]
    # raw RDMA reads healthy under the same fault: only the collective shows it (unsloth PR #10280)
    assert {h: r["status"] for h, r in _verdicts(report, "fabric-bandwidth").items()} == {HEAD: "PASS", WORKER: "PASS"}
    assert sorted(report["failed"]) == ["%s nccl-allreduce" % HEAD, "%s nccl-allreduce" % WORKER], report["failed"]
    assert runner.rc != 0
    for host in (HEAD, WORKER):      # a measurement, not a start: the units stay stopped, no transient unit left
        assert out(host, "systemctl show -p ActiveState --value %s" % UNIT).strip() == "inactive"
        assert out(host, "systemctl list-units --all --plain --no-legend 'dgxspark-doctor-*'").strip() == ""


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory):
    return tmp_path_factory.mktemp("stop")


def test_05_stop_then_converge_serves_again(tmp_module):
    stop = os.path.join(PROJECT, "stop.yml")
    runner = _run(tmp_module, stop)
    assert runner.rc == 0, _failures(runner)
    for host in (HEAD, WORKER):
        assert out(host, "systemctl show -p ActiveState --value %s" % UNIT).strip() == "inactive"
        assert out(host, "systemctl is-enabled %s" % UNIT).strip() == "enabled"
    stops = [ev["event_data"].get("host") for ev in runner.events
             if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task", "").startswith("Stop serving on this node")]
    assert stops == [HEAD, WORKER]                                             # the head first
    memory = _ok_msgs(runner, "Stop unless the memory is back (naming what still holds it)")
    assert sorted(memory) == [HEAD, WORKER], memory
    assert all(re.search(r"MemAvailable [0-9.]+ GiB of MemTotal [0-9.]+ GiB, expected at least 0\.5 GiB", msg)
               for msg in memory.values()), memory
    runner = _run(tmp_module, stop, {"stop_disable": True})
    assert runner.rc == 0, _failures(runner)
    assert sorted(_changed(runner)) == ["%s: Stop serving on this node (the unit stays enabled unless stop_disable)" % h
                                        for h in (HEAD, WORKER)]
    for host in (HEAD, WORKER):
        assert out(host, "systemctl is-enabled %s || true" % UNIT).strip() == "disabled"
    _doctor_measures_the_all_reduce_with_the_units_stopped(tmp_module)
    # site.yml with the tags side_effect.yml's cases re-run (runtime,service): the plays that own the unit; the
    # scenario's full converge.yml twice more cost this lane ~15 of its minutes under the gate's load.
    site = os.path.join(PROJECT, "site.yml")
    runner = _run(tmp_module, site, cmdline="--tags runtime,service")
    assert runner.rc == 0, _failures(runner)
    assert serves().returncode == 0
    for host in (HEAD, WORKER):
        assert out(host, "systemctl is-enabled %s" % UNIT).strip() == "enabled"
    assert sorted(h for h in (HEAD, WORKER) if any(c.startswith(h + ": ") for c in _changed(runner))) == [HEAD, WORKER]
    # the second run with the metrics play too: molecule's idempotence takes the fast path in this scenario, so this is
    # where the metrics role's full run under this scenario's settings (the exporter on the management address behind
    # basic auth, its bcrypt hash) shows it changes nothing
    runner = _run(tmp_module, site, cmdline="--tags metrics,runtime,service")
    assert runner.rc == 0 and _changed(runner) == [], _changed(runner)
    assert any(str(ev["event_data"].get("role", "")).endswith("metrics") for ev in runner.events
               if ev.get("event") == "runner_on_ok"), \
        "the metrics role did not run"
