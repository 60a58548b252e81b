# -*- coding: utf-8 -*-
"""roles/service/files/dgxspark_vllm_check.py run as a subprocess against a stub API on loopback.

The stub answers /v1/models and /v1/completions like vLLM (Bearer key on /v1/*); the
cases: serving, the wrong max_model_len, another served name, no key / wrong key,
a head whose /v1/models answers but whose completion fails (a lost TP peer), nothing listening,
and hung engines: a completion (or /v1/models) that is accepted and never answered, by a stub and
by the vLLM stand-in's hang mode (VLLM_STANDIN_HANG_ON_PEER_LOSS=1) - the check must fail within its
timeouts, not wait forever.
"""

from __future__ import annotations

import json
import socket
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / 'roles' / 'service' / 'files' / 'dgxspark_vllm_check.py'
KEY = 'unit-test-key-7d1e'


def _handler(state):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code, payload):
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self):
            return self.headers.get('Authorization') == 'Bearer %s' % KEY

        def do_GET(self):
            if not self._authorized():
                return self._send(401, {'error': 'Unauthorized'})
            if self.path == '/v1/models':
                return self._send(200, {'object': 'list', 'data': [{'id': state['name'], 'max_model_len': state['len']}]})
            return self._send(404, {})

        def do_POST(self):
            length = int(self.headers.get('Content-Length') or 0)
            request = json.loads(self.rfile.read(length) or b'{}')
            if not self._authorized():
                return self._send(401, {'error': 'Unauthorized'})
            if self.path == '/v1/completions' and state.get('hang'):
                state['hung'].wait(30)             # accepted, never answered (until the test ends)
                return None
            if self.path == '/v1/completions' and state['complete']:
                assert request['max_tokens'] == 1
                return self._send(200, {'choices': [{'text': 'p'}], 'usage': {'completion_tokens': 1}})
            return self._send(500, {'error': 'EngineCore failed'})
    return Handler


@pytest.fixture()
def api():
    state = {'name': 'deepseek-v4-flash-0731', 'len': 1048576, 'complete': True, 'hung': threading.Event()}
    server = ThreadingHTTPServer(('127.0.0.1', 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state['url'] = 'http://127.0.0.1:%d' % server.server_address[1]
    yield state
    state['hung'].set()
    server.shutdown()
    server.server_close()


def _check(url, tmp_path, key=KEY, extra=(), timeout='5', completion_timeout='5', env=None):
    secret = tmp_path / 'vllm-secret.env'
    secret.write_text('# managed\nVLLM_API_KEY=%s\n' % key if key else '# no key\n')
    argv = [sys.executable, str(SCRIPT), '--url', url, '--served-model-name', 'deepseek-v4-flash-0731',
            '--max-model-len', '1048576', '--secret-env-file', str(secret), '--timeout', timeout,
            '--completion-timeout', completion_timeout]
    return subprocess.run(argv + list(extra), capture_output=True, text=True, timeout=60, check=False, env=env)


def test_serving(api, tmp_path):
    run = _check(api['url'], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'a 1-token completion answered' in run.stdout


def test_models_only(api, tmp_path):
    api['complete'] = False
    run = _check(api['url'], tmp_path, extra=['--models-only'])
    assert run.returncode == 0, run.stdout


def test_wrong_max_model_len(api, tmp_path):
    api['len'] = 131072
    run = _check(api['url'], tmp_path)
    assert run.returncode == 1
    assert 'deepseek-v4-flash-0731 has max_model_len 131072, expected 1048576' in run.stdout


def test_other_served_name(api, tmp_path):
    api['name'] = 'deepseek-v4-flash'
    run = _check(api['url'], tmp_path)
    assert run.returncode == 1
    assert '/v1/models lists deepseek-v4-flash, expected deepseek-v4-flash-0731' in run.stdout


@pytest.mark.parametrize('key', ['', 'wrong-key'])
def test_unauthorized(api, tmp_path, key):
    run = _check(api['url'], tmp_path, key=key)
    assert run.returncode == 1
    assert '401' in run.stdout


def test_models_answer_but_the_engine_does_not(api, tmp_path):
    api['complete'] = False
    run = _check(api['url'], tmp_path)
    assert run.returncode == 1
    assert '/v1/completions (1 token)' in run.stdout


def test_nothing_listening(tmp_path):
    run = _check('http://127.0.0.1:9', tmp_path)
    assert run.returncode == 1
    assert run.stdout.startswith('not serving: http://127.0.0.1:9/v1/models')


def test_key_never_in_output(api, tmp_path):
    run = _check(api['url'], tmp_path)
    assert KEY not in run.stdout + run.stderr


# ---------------------------------------------------------------------------- hung engines

def test_a_completion_accepted_and_never_answered_fails_at_the_completion_timeout(api, tmp_path):
    api['hang'] = True
    started = time.monotonic()
    run = _check(api['url'], tmp_path, completion_timeout='1.5')
    elapsed = time.monotonic() - started
    assert run.returncode == 1, run.stdout
    assert run.stdout.startswith('not serving: %s/v1/completions (1 token): ' % api['url']), run.stdout
    assert 'timed out' in run.stdout, run.stdout
    assert 1.5 <= elapsed < 20, elapsed                  # it waited its timeout, and no longer


def test_a_server_that_accepts_and_never_answers_fails_at_the_models_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(8)                                   # the kernel accepts; nothing ever reads or answers
    try:
        url = 'http://127.0.0.1:%d' % listener.getsockname()[1]
        started = time.monotonic()
        run = _check(url, tmp_path, timeout='1', completion_timeout='1')
        assert run.returncode == 1, run.stdout
        assert run.stdout.startswith('not serving: %s/v1/models: ' % url) and 'timed out' in run.stdout, run.stdout
        assert time.monotonic() - started < 20
    finally:
        listener.close()


def test_the_standins_hung_engine_fails_the_check(tmp_path):
    """The vLLM stand-in in hang mode after losing its worker: /health and /v1/models still answer, the completion
    hangs (what /health alone cannot see); the check fails at its completion timeout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'sim'))
    from test_vllm_standin import KEY as STANDIN_KEY, start_pair, wait_ready  # pylint: disable=import-outside-toplevel
    head, worker, port = start_pair(tmp_path, {'VLLM_STANDIN_HANG_ON_PEER_LOSS': '1'})
    try:
        wait_ready(port, [head, worker])
        url = 'http://127.0.0.1:%d' % port
        assert _check(url, tmp_path, key=STANDIN_KEY).returncode == 0
        worker.popen.kill()
        deadline = time.monotonic() + 10
        while 'EngineCore is stuck' not in head.log():
            assert time.monotonic() < deadline, head.log()
            time.sleep(0.05)
        assert _check(url, tmp_path, key=STANDIN_KEY, extra=['--models-only']).returncode == 0   # /v1/models still fine
        run = _check(url, tmp_path, key=STANDIN_KEY, completion_timeout='1.5')
        assert run.returncode == 1, run.stdout
        assert '/v1/completions (1 token)' in run.stdout and 'timed out' in run.stdout, run.stdout
    finally:
        head.stop()
        worker.stop()


def test_a_proxy_in_the_environment_never_sees_the_key(api, tmp_path):
    """http_proxy set on the node: urllib would send the head's own request (and its bearer key) to it."""
    seen = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path, self.headers.get('Authorization')))
            self.send_response(502)
            self.end_headers()

        do_POST = do_GET

    proxy = ThreadingHTTPServer(('127.0.0.1', 0), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        url = 'http://127.0.0.1:%d' % proxy.server_address[1]
        env = {k: v for k, v in os.environ.items() if k.lower() not in ('no_proxy', 'http_proxy', 'https_proxy', 'all_proxy')}
        env.update(http_proxy=url, HTTP_PROXY=url, all_proxy=url)
        run = _check(api['url'], tmp_path, env=env)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert seen == []
    assert run.returncode == 0, run.stdout + run.stderr
