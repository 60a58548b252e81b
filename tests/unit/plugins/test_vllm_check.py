# -*- coding: utf-8 -*-
"""roles/service/files/dgxspark_vllm_check.py run as a subprocess against a stub API on loopback.

The stub answers /v1/models and /v1/completions like vLLM (Bearer key on /v1/*); the
cases: serving, the wrong max_model_len, another served name, no key / wrong key,
a head whose /v1/models answers but whose completion fails (a lost TP peer), nothing listening.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
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
            if self.path == '/v1/completions' and state['complete']:
                assert request['max_tokens'] == 1
                return self._send(200, {'choices': [{'text': 'p'}], 'usage': {'completion_tokens': 1}})
            return self._send(500, {'error': 'EngineCore failed'})
    return Handler


@pytest.fixture()
def api():
    state = {'name': 'deepseek-v4-flash-0731', 'len': 1048576, 'complete': True}
    server = ThreadingHTTPServer(('127.0.0.1', 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state['url'] = 'http://127.0.0.1:%d' % server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()


def _check(url, tmp_path, key=KEY, extra=()):
    secret = tmp_path / 'vllm-secret.env'
    secret.write_text('# managed\nVLLM_API_KEY=%s\n' % key if key else '# no key\n')
    argv = [sys.executable, str(SCRIPT), '--url', url, '--served-model-name', 'deepseek-v4-flash-0731',
            '--max-model-len', '1048576', '--secret-env-file', str(secret), '--timeout', '5', '--completion-timeout', '5']
    return subprocess.run(argv + list(extra), capture_output=True, text=True, timeout=60, check=False)


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


# ---------------------------------------------------------------------------- a hung engine (the vLLM stand-in)

def test_completion_timeout_catches_a_hung_engine(tmp_path):
    """The stand-in's hang mode: the worker is lost, /health and /v1/models still answer, a completion hangs.
    The checker with a short --completion-timeout must fail (not wait forever, not pass on /v1/models)."""
    import os
    import signal
    import socket
    import time
    import urllib.request

    from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_cmd import serve_argv

    src = Path(__file__).resolve().parents[3] / 'sim' / 'vllm-standin' / 'src'

    def free_port():
        with socket.socket() as sock:
            sock.bind(('127.0.0.1', 0))
            return sock.getsockname()[1]

    port, master = free_port(), free_port()
    knobs = {'runtime_vllm_host': '127.0.0.1', 'runtime_vllm_port': port, 'runtime_vllm_master_port': master}
    env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'PYTHONPATH': str(src), 'HOME': str(tmp_path),
           'VLLM_STANDIN_LOAD_SECONDS': '0.2', 'VLLM_API_KEY': KEY, 'VLLM_STANDIN_HANG_ON_PEER_LOSS': '1',
           'VLLM_STANDIN_PEER_TIMEOUT': '2', 'LANG': 'C.UTF-8'}
    procs = []
    for role, rank in (('worker', 1), ('head', 0)):
        argv = serve_argv(knobs, role, rank, 2, '127.0.0.1', command=[sys.executable, '-m', 'vllm', 'serve'])
        with (tmp_path / (role + '.log')).open('w') as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path)))
    worker, head = procs
    try:
        deadline = time.monotonic() + 20
        while _check('http://127.0.0.1:%d' % port, tmp_path, extra=['--models-only']).returncode != 0:
            assert time.monotonic() < deadline and head.poll() is None, (tmp_path / 'head.log').read_text()
            time.sleep(0.2)
        assert _check('http://127.0.0.1:%d' % port, tmp_path).returncode == 0   # serving: the completion answers
        worker.kill()
        worker.wait()
        deadline = time.monotonic() + 10
        while 'EngineCore is stuck' not in (tmp_path / 'head.log').read_text():
            assert time.monotonic() < deadline, (tmp_path / 'head.log').read_text()
            time.sleep(0.1)
        with urllib.request.urlopen('http://127.0.0.1:%d/health' % port, timeout=5) as resp:
            assert resp.status == 200                                           # /health still says OK
        models = _check('http://127.0.0.1:%d' % port, tmp_path, extra=['--models-only'])
        assert models.returncode == 0                                            # /v1/models too
        start = time.monotonic()
        run = _check('http://127.0.0.1:%d' % port, tmp_path, extra=['--completion-timeout', '1.5'])
        took = time.monotonic() - start
        assert run.returncode == 1, run.stdout
        assert 'not serving:' in run.stdout and '/v1/completions (1 token)' in run.stdout and 'timed out' in run.stdout
        assert 1.0 < took < 15
        assert head.poll() is None                                               # the head hangs, it did not exit
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
