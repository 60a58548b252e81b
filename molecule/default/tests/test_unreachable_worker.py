"""A worker that drops off the network in the middle of site.yml: the run stops
naming that host, no task runs after the fault, and the head's serving
configuration (unit, environment files, restart mark) is left exactly as it was:
no half-applied change on the pair. (The head's rank is not asserted here: like a
real one, the stand-in's engine only stalls while its TP peer is paused, its requests
waiting until the peer answers again or the execute-model timeout ends the engine;
that is not Ansible's doing.)

The change under way is a knob that would rewrite and restart both ranks
(max_num_seqs 8), made with the tags the service role recommends for such a change
(--tags runtime,service: the Preflight play's topology runs too, tagged always); the
worker is paused (docker pause: its ssh stops answering) as soon as the Runtime play
starts, i.e. after the Preflight play ran on both. The plays before Runtime do not
change what the fault tests (each play stops on its own any_errors_fatal), and a full
run would spend ~400 more task runs on the pair before reaching it (83 s of this test
alone, 327 s in the gate of 2026-12-07).
"""

import subprocess
import time

import siterun

# What the head serves with: the unit, its environment files, the check script, the restart mark.
HEAD_FILES = ("/etc/systemd/system/dgxspark-vllm.service /etc/dgxspark/vllm.env "
              "/etc/dgxspark/vllm-secret.env /usr/local/lib/dgxspark/dgxspark_vllm_check.py")
HEAD_STATE = "sudo sha256sum %s && sudo ls /var/lib/dgxspark" % HEAD_FILES


def _head_snapshot():
    proc = siterun.ssh("spark-head", HEAD_STATE)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_worker_unreachable_mid_run_names_it_and_leaves_the_head_untouched(tmp_path):
    before = _head_snapshot()
    worker = siterun.container("spark-worker")
    paused = []

    def pause_worker_when_runtime_starts(event):
        play = event.get("event_data", {}).get("play", "")
        if event.get("event") == "playbook_on_play_start" and play.startswith("Runtime") and not paused:
            subprocess.run(["docker", "pause", worker], check=True, capture_output=True)
            paused.append(play)
        return True

    try:
        runner = siterun.run_site(tmp_path, extravars={"runtime_vllm_max_num_seqs": 8}, cmdline="--tags runtime,service",
                                  event_handler=pause_worker_when_runtime_starts)
    finally:
        if paused:
            subprocess.run(["docker", "unpause", worker], check=False, capture_output=True)
    assert paused, "the Runtime play never started: the fault was not injected"
    assert runner.rc != 0, "site.yml passed with its worker unreachable"

    unreachable = {ev["event_data"]["host"] for ev in runner.events if ev.get("event") == "runner_on_unreachable"}
    assert unreachable == {"spark-worker"}, siterun.failure_messages(runner)
    stdout = runner.stdout.read()
    assert "fatal: [spark-worker]: UNREACHABLE!" in stdout
    # the head took no change from the run: neither from the tasks nor in its files and rank
    assert [t for t in siterun.changed_tasks(runner) if t.startswith("spark-head")] == []
    # any_errors_fatal: after the fault no task ran on any host (no later task of the
    # Runtime play, nothing of the Service play: the head's unit is neither rewritten nor restarted)
    events = list(runner.events)
    fault = next(i for i, ev in enumerate(events) if ev.get("event") == "runner_on_unreachable")
    later = ["%s: %s (%s)" % (ev["event_data"].get("host"), ev["event_data"].get("task"), ev["event_data"].get("play"))
             for ev in events[fault + 1:]
             if ev.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")]
    assert later == [], "tasks ran after the worker was lost: %s" % later
    assert _head_snapshot() == before

    # the worker answers again once it is back and its rank runs (systemd restarts it
    # if it lost its peer meanwhile): nothing left half-done that breaks the next run
    for _ in range(60):
        proc = siterun.ssh("spark-worker", "systemctl is-active dgxspark-vllm")
        if proc.stdout.strip() == "active":
            break
        time.sleep(2)
    assert proc.stdout.strip() == "active", proc.stdout + proc.stderr
