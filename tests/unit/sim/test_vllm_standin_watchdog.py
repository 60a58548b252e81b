# -*- coding: utf-8 -*-
"""The stand-in's `wedge` and `slow-prefill` faults, and the service role's watchdog against them.

The stand-in's API server runs in this process on loopback with its faults in a state file of the test's own,
as `spark-sim fault` sets them on a node. The watchdog (roles/service/files/dgxspark_vllm_watchdog.py) runs its
real tick against it; only systemd is replaced (the unit's state, and the restart it asks for is recorded).
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / 'sim' / 'vllm-standin' / 'src'))
sys.path.insert(0, str(ROOT / 'plugins' / 'module_utils'))    # vllm_metrics.py, as installed beside the watchdog
sys.path.insert(0, str(ROOT / 'roles' / 'service' / 'files'))

from vllm import engine as behaviour  # noqa: E402  (the stand-in)
from vllm.server import ApiServer, Engine  # noqa: E402

import vllm_metrics  # noqa: E402
watchdog = importlib.import_module('dgxspark_vllm_watchdog')

KEY = 'sk-watchdog-test'
CHUNK = 200


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Standin:
    def __init__(self, tmp, faults=()):
        self.state = tmp / 'state.json'
        self.set(*faults)
        self.engine = Engine('deepseek-ai/DeepSeek-V4-Flash-0731', ['srv'], 1048576, 3, chunk_tokens=CHUNK,
                             kv_capacity_tokens=100000)
        self.engine.sched = behaviour.Scheduler(behaviour.Conditions({}, str(self.state)), chunk_tokens=CHUNK)
        self.port = free_port()
        self.api = ApiServer('127.0.0.1', self.port, self.engine, [KEY])
        self.api.start()
        self.url = 'http://127.0.0.1:%d' % self.port

    def set(self, *faults):
        time.sleep(0.01)    # a new mtime or size: the engine re-reads the file
        self.state.write_text(json.dumps({'vllm_standin': {'prefill_tok_s': 0, 'decode_tok_s': 0, 'faults': list(faults),
                                                           'pad': 'x' * len(faults)}}))

    def metrics(self):
        with urllib.request.urlopen(self.url + '/metrics', timeout=5) as resp:
            return vllm_metrics.sample_of(vllm_metrics.parse_metrics(resp.read().decode()), time.monotonic())

    def health(self):
        with urllib.request.urlopen(self.url + '/health', timeout=5) as resp:
            return resp.status

    def request(self, prompt='ping', max_tokens=4, timeout=30):
        """A completion in a thread; returns (thread, result list: the payload, or the exception)."""
        out = []

        def send():
            body = json.dumps({'model': 'srv', 'prompt': prompt, 'max_tokens': max_tokens}).encode()
            req = urllib.request.Request(self.url + '/v1/completions', data=body, method='POST',
                                         headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + KEY})
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    out.append(json.loads(resp.read().decode()))
            except Exception as exc:  # noqa: BLE001 - the test reads what happened
                out.append(exc)
        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        return thread, out

    def stop(self):
        self.set()
        self.api.stop()
        self.engine.stopping.set()


@pytest.fixture()
def standin(tmp_path):
    s = Standin(tmp_path)
    yield s
    s.stop()


def wait_for(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_wedge_freezes_the_counters_health_stays_200_requests_hang(standin):
    thread, out = standin.request()
    thread.join(5)
    assert out and out[0]['choices'], out
    before = standin.metrics()
    assert before['generation'] == 4 and before['running'] == 0
    standin.set('wedge')
    thread, out = standin.request()
    assert wait_for(lambda: standin.metrics()['running'] == 1)
    first = standin.metrics()
    time.sleep(1.0)
    second = standin.metrics()
    assert standin.health() == 200
    assert thread.is_alive() and not out                      # the request hangs
    assert (first['prompt'], first['generation'], first['kv']) == (second['prompt'], second['generation'], second['kv'])
    assert (first['prompt'], first['generation']) == (before['prompt'], before['generation'])
    state, verdict = vllm_metrics.assess({}, first, 'p1', 0.5)
    state, verdict = vllm_metrics.assess(state, second, 'p1', 0.5)
    assert verdict['status'] == 'stalled'
    standin.set()                                             # cleared: the waiting request goes on
    thread.join(5)
    assert out and out[0]['choices'], out


def test_a_wedge_set_before_the_engine_started_is_not_felt(tmp_path):
    """A restart clears a wedge: the new process serves; clear and set it again to wedge that one too."""
    s = Standin(tmp_path, faults=('wedge',))
    try:
        thread, out = s.request()
        thread.join(5)
        assert out and out[0]['choices'], out
        s.set()
        time.sleep(0.5)                                       # the engine sees the clear
        s.set('wedge')
        thread, out = s.request(timeout=2)
        thread.join(1)
        assert thread.is_alive() and not out
    finally:
        s.stop()


def test_slow_prefill_moves_the_kv_usage_not_the_counters(standin):
    """940 tokens/s (seed 000: 468,540 tokens in 498 s), chunk by chunk; the prompt counts when the prefill ends."""
    standin.set('slow-prefill')
    prompt = ' '.join(['word'] * 1880)                        # ~2 s at 940 tokens/s, ~9 chunks of 200
    thread, out = standin.request(prompt=prompt, max_tokens=2)
    samples = []
    while thread.is_alive() and len(samples) < 200:
        samples.append(standin.metrics())
        time.sleep(0.1)
    thread.join(5)
    assert out and out[0]['usage']['prompt_tokens'] == 1880, out
    busy = [x for x in samples if x['running'] == 1]
    assert len(busy) >= 10, samples
    kvs = [x['kv'] for x in busy]
    assert kvs == sorted(kvs) and len(set(kvs)) >= 5, kvs  # grows chunk by chunk
    assert {x['prompt'] for x in busy[:-3]} == {0.0}        # the prompt counter waits for the end of the prefill
    assert {x['generation'] for x in busy[:-3]} == {0.0}
    after = standin.metrics()
    assert after['prompt'] == 1880 and after['generation'] == 2 and after['kv'] == 0.0
    state, statuses = {}, []
    for sample in busy:                                       # a window of 0.5 s: far shorter than the prefill
        state, verdict = vllm_metrics.assess(state, sample, 'p1', 0.5)
        statuses.append(verdict['status'])
    assert 'stalled' not in statuses, statuses


class Systemd:
    """systemctl for the watchdog: the unit's state, and the restarts it asks for."""

    def __init__(self):
        self.invocation = 'inv-1'
        self.calls = []

    def show(self, unit):
        return {'ActiveState': 'active', 'SubState': 'running', 'InvocationID': self.invocation, 'MainPID': '4242',
                'ExecMainStartTimestamp': 'Wed 2026-12-02 13:00:00 UTC', 'NRestarts': '0'}

    def run(self, argv, **_kw):
        self.calls.append(list(argv))

        class Done:
            returncode = 0
            stdout = 'Dec 02 13:00:01 spark-head dgxspark-vllm[4242]: INFO Application startup complete.\n'
            stderr = ''
        return Done()


@pytest.fixture()
def systemd(monkeypatch):
    fake = Systemd()
    monkeypatch.setattr(watchdog, 'unit_show', fake.show)
    monkeypatch.setattr(watchdog.subprocess, 'run', fake.run)
    return fake


def config(standin, tmp_path, **over):
    secret = tmp_path / 'vllm-secret.env'
    secret.write_text('VLLM_API_KEY="%s"\n' % KEY)
    conf = {'url': standin.url, 'unit': 'dgxspark-vllm.service', 'kind': 'venv', 'container_name': '',
            'served_model_name': 'srv', 'secret_env_file': str(secret), 'state_dir': str(tmp_path), 'stall_sec': 1,
            'interval_sec': 1, 'probe_timeout': 1, 'restart': True, 'max_restarts': 1, 'window_sec': 600, 'log_lines': 5,
            'workers': [['spark-worker', 1]]}
    conf.update(over)
    return conf


def restarts(systemd):
    return [c for c in systemd.calls if c[:2] == ['systemctl', 'restart']]


def test_watchdog_restarts_a_wedged_head_once_then_the_bound_holds(standin, systemd, tmp_path, capsys):
    conf = config(standin, tmp_path)
    state = watchdog.tick(conf, {})                            # idle: the 1-token probe answers
    assert state['probed_at'] and not restarts(systemd)
    standin.set('wedge')
    thread, _out = standin.request()
    assert wait_for(lambda: standin.metrics()['running'] == 1)
    state = watchdog.tick(conf, state)
    time.sleep(1.2)
    state = watchdog.tick(conf, state)
    assert restarts(systemd) == [['systemctl', 'restart', '--no-block', 'dgxspark-vllm.service']]
    log = capsys.readouterr().out
    assert 'WEDGED: requests are in and nothing moved since' in log
    assert 'running 1, waiting 0, prompt_tokens_total 1, generation_tokens_total 1' in log   # the probe's 1 + 1 tokens
    assert 'head rank log | ' in log and 'worker node rank 1 (spark-worker)' in log
    assert 'restarting the ranks' in log and 'restart 1 of at most 1' in log
    assert state['counts'] == {'wedges': 1, 'restarts': 1, 'not_restarted': 0}
    # the same process still wedged (the restart did not happen here): the bound of 1 holds
    systemd.invocation = 'inv-2'
    state = watchdog.tick(conf, state)
    time.sleep(1.2)
    state = watchdog.tick(conf, state)
    assert len(restarts(systemd)) == 1
    assert 'not restarted: the bound is reached, 1 restarts in the last 600 s' in capsys.readouterr().out
    assert state['counts'] == {'wedges': 2, 'restarts': 1, 'not_restarted': 1}
    state = watchdog.tick(conf, state)                          # the same episode is not counted twice
    assert 'still wedged' in capsys.readouterr().out and state['counts']['wedges'] == 2
    assert not any(KEY in ' '.join(c) for c in systemd.calls)   # the key never in an argv
    standin.set()
    thread.join(5)


def test_watchdog_reports_only_when_restart_is_false(standin, systemd, tmp_path, capsys):
    conf = config(standin, tmp_path, restart=False)
    standin.set('wedge')
    thread, _out = standin.request()
    assert wait_for(lambda: standin.metrics()['running'] == 1)
    state = watchdog.tick(conf, {})
    time.sleep(1.2)
    state = watchdog.tick(conf, state)
    assert not restarts(systemd)
    assert 'not restarted: service_watchdog_restart is false (reported only)' in capsys.readouterr().out
    assert state['counts'] == {'wedges': 1, 'restarts': 0, 'not_restarted': 1}
    standin.set()
    thread.join(5)


def test_watchdog_probe_finds_an_idle_wedged_engine(standin, systemd, tmp_path, capsys):
    conf = config(standin, tmp_path)
    standin.set('wedge')
    state = watchdog.tick(conf, {})
    assert len(restarts(systemd)) == 1
    log = capsys.readouterr().out
    assert '/health answers 200 but the 1-token completion got no answer within 1 s' in log
    assert state['counts']['restarts'] == 1
    standin.set()


def test_watchdog_leaves_a_slow_prefill_alone(standin, systemd, tmp_path, capsys):
    conf = config(standin, tmp_path)
    standin.set('slow-prefill')
    thread, out = standin.request(prompt=' '.join(['word'] * 1880), max_tokens=2)
    state = {}
    while thread.is_alive():
        state = watchdog.tick(conf, state)
        time.sleep(0.3)
    thread.join(5)
    assert out and out[0]['choices'], out
    assert not restarts(systemd)
    log = capsys.readouterr().out
    assert 'WEDGED' not in log and 'progress: ' in log


def test_watchdog_does_nothing_while_the_unit_is_not_active(standin, systemd, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(watchdog, 'unit_show', lambda unit: {'ActiveState': 'inactive'})
    standin.set('wedge')
    watchdog.tick(config(standin, tmp_path), {})
    assert not restarts(systemd)
    assert 'dgxspark-vllm.service is inactive: nothing to watch' in capsys.readouterr().out
    standin.set()
