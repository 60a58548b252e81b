# -*- coding: utf-8 -*-
"""roles/service/files/dgxspark_vllm_check.py run as a subprocess against a stub API on loopback.

The stub answers /health, /v1/models, /v1/completions and /v1/chat/completions like vLLM (Bearer key
on /v1/*); the cases: serving (both 1-token requests answered), the wrong max_model_len, another served
name, no key / wrong key, a head whose /v1/models answers but whose completion fails, a chat completion
that fails alone (no chat template), nothing listening, and hung engines: a completion (or /v1/models)
that is accepted and never answered, by a stub and by the vLLM stand-in after it lost its worker
(/health 200, requests wait until the execute-model timeout) - the check must fail within its timeouts,
say the engine hangs (exit 3) when /health answers 200, and not wait forever.
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
            return self.path == '/health' or self.headers.get('Authorization') == 'Bearer %s' % KEY

        def do_GET(self):
            if not self._authorized():
                return self._send(401, {'error': 'Unauthorized'})
            if self.path == '/health':
                return self._send(state.get('health', 200), {})
            if self.path == '/v1/models':
                return self._send(200, {'object': 'list', 'data': [{'id': state['name'], 'max_model_len': state['len']}]})
            return self._send(404, {})

        def do_POST(self):
            length = int(self.headers.get('Content-Length') or 0)
            request = json.loads(self.rfile.read(length) or b'{}')
            if not self._authorized():
                return self._send(401, {'error': 'Unauthorized'})
            state.setdefault('posted', []).append(self.path)
            if self.path in state.get('hang', ()):
                state['hung'].wait(30)             # accepted, never answered (until the test ends)
                return None
            if self.path == '/v1/completions' and state['complete']:
                assert request['max_tokens'] == 1
                return self._send(200, {'choices': [{'text': 'p'}], 'usage': {'completion_tokens': 1}})
            if self.path == '/v1/chat/completions' and state.get('chat', True):
                assert request['max_tokens'] == 1 and request['messages'][0]['role'] == 'user'
                return self._send(200, {'choices': [{'message': {'role': 'assistant', 'content': 'p'}}]})
            if self.path == '/v1/chat/completions':
                return self._send(400, {'error': {'message': 'As of transformers v4.44, default chat template is no '
                                                             'longer allowed', 'type': 'BadRequestError', 'code': 400}})
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
    assert 'a 1-token completion and a 1-token chat completion answered' in run.stdout
    assert api['posted'] == ['/v1/completions', '/v1/chat/completions']


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

def test_a_completion_accepted_and_never_answered_with_health_ok_is_a_hang(api, tmp_path):
    api['hang'] = ('/v1/completions',)
    started = time.monotonic()
    run = _check(api['url'], tmp_path, completion_timeout='1.5')
    elapsed = time.monotonic() - started
    assert run.returncode == 3, run.stdout
    assert run.stdout.startswith('engine hangs: /health answers 200 and /v1/models lists deepseek-v4-flash-0731, '
                                 'but the 1-token completion (/v1/completions) got no answer within 1.5 s'), run.stdout
    assert 1.5 <= elapsed < 20, elapsed                  # it waited its timeout, and no longer


def test_a_chat_completion_that_hangs_alone_is_a_hang_too(api, tmp_path):
    api['hang'] = ('/v1/chat/completions',)
    run = _check(api['url'], tmp_path, completion_timeout='1')
    assert run.returncode == 3, run.stdout
    assert 'the 1-token chat completion (/v1/chat/completions) got no answer within 1 s' in run.stdout


def test_a_completion_that_times_out_while_health_fails_is_not_serving(api, tmp_path):
    api['hang'] = ('/v1/completions',)
    api['health'] = 503
    run = _check(api['url'], tmp_path, completion_timeout='1')
    assert run.returncode == 1, run.stdout
    assert run.stdout == 'not serving: %s/v1/completions (1 token): no answer within 1 s; /health: 503\n' % api['url']


def test_a_chat_completion_that_fails_alone_is_not_serving(api, tmp_path):
    """The venv kind without the tokenizer mode: completions answer, chat gets 400 (no Jinja template)."""
    api['chat'] = False
    run = _check(api['url'], tmp_path)
    assert run.returncode == 1, run.stdout
    assert run.stdout.startswith('not serving: %s/v1/chat/completions (1 token): HTTP 400 As of transformers v4.44'
                                 % api['url']), run.stdout


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
    """The vLLM stand-in after losing its worker: /health and /v1/models still answer, the completion waits (what
    /health alone cannot see); the check says the engine hangs at its completion timeout, long before the
    execute-model timeout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'sim'))
    from test_vllm_standin import KEY as STANDIN_KEY, start_pair, wait_ready  # pylint: disable=import-outside-toplevel
    head, worker, port = start_pair(tmp_path, {'VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS': '60'})
    try:
        wait_ready(port, [head, worker])
        url = 'http://127.0.0.1:%d' % port
        healthy = _check(url, tmp_path, key=STANDIN_KEY)
        assert healthy.returncode == 0, healthy.stdout
        assert 'a 1-token completion and a 1-token chat completion answered' in healthy.stdout
        worker.popen.kill()
        worker.wait()
        time.sleep(0.5)
        assert _check(url, tmp_path, key=STANDIN_KEY, extra=['--models-only']).returncode == 0   # /v1/models still fine
        run = _check(url, tmp_path, key=STANDIN_KEY, completion_timeout='1.5')
        assert run.returncode == 3, run.stdout
        assert run.stdout.startswith('engine hangs: /health answers 200'), run.stdout
        assert head.popen.poll() is None
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
