"""site.yml in check mode with --diff on the converged (and rebooted) pair:
no task reports a change and none fails, on any host."""

import siterun


def test_check_mode_with_diff_changes_nothing_and_fails_nowhere(tmp_path):
    runner = siterun.run_site(tmp_path, cmdline="--check --diff")
    assert runner.rc == 0, siterun.failure_messages(runner)
    assert siterun.failure_messages(runner) == []
    assert siterun.changed_tasks(runner) == [], "changed in check mode: %s" % siterun.changed_tasks(runner)
    # every play ran on both nodes (a check run that skipped the roles would prove nothing)
    recap = [ev for ev in runner.events if ev.get("event") == "playbook_on_stats"][-1]["event_data"]
    for host in siterun.HOSTS:
        assert recap["ok"].get(host, 0) > 50, recap
