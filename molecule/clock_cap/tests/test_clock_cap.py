"""Live state of the clock_cap scenario's sim pair after converge, idempotence
and side_effect (the worker rebooted; the head's lock dropped by hand and
re-applied by the role, a new ceiling, the cap stopped and started; out-of-range
ceilings refused).

Molecule's `check` step is not in this scenario's test sequence (it asserts nothing): check mode
is asserted once, site-wide, in the default scenario's verify (test_doctor.py, after doctor ran).
"""

import json

UNIT = "dgxspark-clock-cap.service"
SERVING = "dgxspark-vllm.service"
DROPIN = "/etc/systemd/system/dgxspark-vllm.service.d/10-dgxspark-clock-cap.conf"


def _state(host):
    return json.loads(host.file("/var/lib/spark-sim/state.json").content_string)


def test_unit_is_enabled_and_active(host):
    unit = host.service(UNIT)
    assert unit.is_enabled
    assert unit.is_running  # oneshot with RemainAfterExit: active (exited)


def test_unit_orders_before_the_serving_unit_retries_and_resets_on_stop(host):
    show = host.check_output("systemctl show -p Before -p ExecStop -p ExecStart -p WantedBy -p TimeoutStartUSec %s" % UNIT)
    before = [line for line in show.splitlines() if line.startswith("Before=")][0]
    assert "dgxspark-vllm.service" in before.split("=", 1)[1].split(), before
    assert "/usr/local/sbin/dgxspark-clock-cap apply /usr/bin/nvidia-smi 0 2100 3 5" in show
    assert "/usr/local/sbin/dgxspark-clock-cap release /usr/bin/nvidia-smi" in show
    assert "TimeoutStartUSec=6min 15s" in show  # 3 attempts x (2 x 60 s + 5 s)


def test_the_serving_unit_requires_the_cap(host):
    dropin = host.file(DROPIN)
    assert dropin.exists and dropin.mode == 0o644
    show = host.check_output("systemctl show -p Wants -p After -p Requires -p ExecStartPre -p DropInPaths %s" % SERVING)
    assert DROPIN in show
    assert "dgxspark-clock-cap.service" in [line for line in show.splitlines() if line.startswith("Wants=")][0]
    assert "dgxspark-clock-cap.service" in [line for line in show.splitlines() if line.startswith("After=")][0]
    assert "dgxspark-clock-cap.service" not in [line for line in show.splitlines() if line.startswith("Requires=")][0]
    assert "/usr/local/sbin/dgxspark-clock-cap require dgxspark-clock-cap.service" in show
    assert host.service(SERVING).is_running


def test_the_stand_in_holds_the_lock(host):
    assert _state(host)["gpu"]["locked_clocks"] == {"min_mhz": 0, "max_mhz": 2100}
    out = host.check_output("nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader,nounits")
    assert out.strip() == "2080, 3003"
    assert host.file("/run/dgxspark/clock-cap.status").content_string.startswith("capped: SM clock 2080 MHz")


def test_q_clock_shows_the_capped_sm_clock(host):
    out = host.check_output("nvidia-smi -q -d CLOCK")
    sm = [line for line in out.splitlines() if line.strip().startswith("SM")]
    assert sm[0].split(":")[1].strip() == "2080 MHz"


def test_worker_rebooted_and_the_lock_came_back(host):
    state = _state(host)
    name = host.backend.get_hostname()
    assert state["boot"]["count"] == (2 if name == "spark-worker" else 1)
    journal = host.check_output("journalctl -b -u %s --no-pager -o cat" % UNIT)
    assert "GPU clocks set to" in journal
    assert "capped at 2100 MHz (attempt 1 of 3)" in journal
