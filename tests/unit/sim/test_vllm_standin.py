"""The vLLM stand-in (sim/vllm-standin): argparse, the start-up checks, the head/worker
rendezvous, the OpenAI API, metrics and peer loss. Every process runs on 127.0.0.1
with free ports; a pair comes up in about a second (VLLM_STANDIN_LOAD_SECONDS=0.2).

The commands are rendered by the collection's filter (vllm_serve_argv), so the
stand-in is tested against exactly what the roles will run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_cmd import serve_argv

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / 'sim' / 'vllm-standin'
SRC = STANDIN / 'src'
sys.path.insert(0, str(SRC))

from vllm import __version__, checks  # noqa: E402  (the stand-in, from sim/vllm-standin/src)
from vllm.cli import build_parser, config_problems  # noqa: E402

KEY = 'sk-standin-test-key'
MODEL = 'deepseek-ai/DeepSeek-V4-Flash-0731'
SHA = '9e165c30e2704aec5d9d593cce3eebd58bbef1cb'
SERVED = 'deepseek-v4-flash-0731'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def argv(role: str, port: int, master_port: int, **knobs: Any) -> List[str]:
    k = {'runtime_vllm_host': '127.0.0.1', 'runtime_vllm_port': port, 'runtime_vllm_master_port': master_port}
    k.update({'runtime_vllm_' + name: value for name, value in knobs.items()})
    return serve_argv(k, role, 0 if role == 'head' else 1, 2, '127.0.0.1', command=[sys.executable, '-m', 'vllm', 'serve'])


class Proc:
    """A stand-in process with its output in files (never a full pipe)."""

    def __init__(self, tmp: Path, name: str, args: List[str], env: Optional[Dict[str, str]] = None):
        self.out = tmp / ('%s.out' % name)
        self.err = tmp / ('%s.err' % name)
        full_env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'PYTHONPATH': str(SRC), 'HOME': str(tmp),
                    'VLLM_STANDIN_LOAD_SECONDS': '0.2', 'VLLM_API_KEY': KEY, 'LANG': 'C.UTF-8'}
        full_env.update(env or {})
        self.popen = subprocess.Popen(args, stdout=self.out.open('w'), stderr=self.err.open('w'), env=full_env, cwd=str(tmp))

    def log(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def mark(self) -> Tuple[int, int]:
        """Where each stream ends now (stdout and stderr grow apart: an offset into log() would shift)."""
        return len(self.out.read_text()), len(self.err.read_text())

    def since(self, mark: Tuple[int, int]) -> List[str]:
        """The lines written after ``mark``, less the access lines of our own requests before it (the server writes a
        request's access line after its response, so wait_ready's own /v1/models line may land after the mark)."""
        text = self.out.read_text()[mark[0]:] + self.err.read_text()[mark[1]:]
        return [line for line in text.splitlines() if not re.search(r' - "GET /v1/models HTTP/1\.[01]" 200 OK$', line)]

    def wait(self, timeout: float = 5.0) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def request(port: int, path: str, body: Optional[Dict[str, Any]] = None, key: Optional[str] = KEY,
            timeout: float = 5.0) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request('http://127.0.0.1:%d%s' % (port, path), data=data)
    if data is not None:
        req.add_header('Content-Type', 'application/json')
    if key is not None:
        req.add_header('Authorization', 'Bearer %s' % key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(port: int, procs: List[Proc], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.popen.poll() is None, proc.log()
        try:
            if request(port, '/v1/models', timeout=1.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError('not ready after %.0f s:\n%s' % (timeout, '\n'.join(p.log() for p in procs)))


def start_pair(tmp: Path, env: Optional[Dict[str, str]] = None, worker_knobs: Optional[Dict[str, Any]] = None):
    port, master = free_port(), free_port()
    worker = Proc(tmp, 'worker', argv('worker', port, master, **(worker_knobs or {})), env)   # workers first, as in the recipe
    head = Proc(tmp, 'head', argv('head', port, master), env)
    return head, worker, port


@pytest.fixture(scope='module')
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('pair')
    head, worker, port = start_pair(tmp)
    try:
        wait_ready(port, [head, worker])
        yield head, worker, port
    finally:
        head.stop()
        worker.stop()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + '{'):
            return float(line.rsplit(' ', 1)[1])
    raise AssertionError('%s not in /metrics:\n%s' % (name, text))


# ---------------------------------------------------------------------------- argparse

def run_cli(tmp: Path, *args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    full_env = {'PATH': os.environ.get('PATH', ''), 'PYTHONPATH': str(SRC), 'HOME': str(tmp)}
    full_env.update(env or {})
    return subprocess.run([sys.executable, '-m', 'vllm', *args], capture_output=True, text=True, env=full_env, cwd=str(tmp),
                          timeout=20, check=False)


def test_unknown_flag_exits_2_like_argparse(tmp_path):
    proc = run_cli(tmp_path, 'serve', MODEL, '--max-num-seq', '6', '--no-such-flag')
    assert proc.returncode == 2
    assert 'vllm serve: error: unrecognized arguments: --no-such-flag' in proc.stderr


@pytest.mark.parametrize('args', [
    ['serve', MODEL, '--speculative-config', '{method: dspark}'],
    ['serve', MODEL, '--kv-cache-dtype', 'nvfp4'],
    ['serve', MODEL, '--max-num-seqs', 'six'],
    ['serve', MODEL, '--max-model-len', '1T'],
    [],
], ids=['bad-json', 'bad-choice', 'not-an-int', 'bad-human-int', 'no-command'])
def test_bad_values_exit_2(args, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(args)
    assert exc.value.code == 2 and 'error:' in capsys.readouterr().err


def test_help_and_version(tmp_path):
    proc = run_cli(tmp_path, 'serve', '--help')
    assert proc.returncode == 0 and '--speculative-config' in proc.stdout and '--headless' in proc.stdout
    proc = run_cli(tmp_path, '--version')
    assert proc.returncode == 0 and proc.stdout.strip() == __version__ == '0.27.1+spark.sim'


@pytest.mark.parametrize('role', ['head', 'worker'])
def test_the_filters_command_parses_with_no_start_up_problem(role):
    args = build_parser().parse_args(argv(role, 8888, 25000)[3:])
    assert args.model_tag == MODEL and args.revision == SHA and args.served_model_name == [SERVED]
    assert (args.tensor_parallel_size, args.nnodes, args.node_rank, args.headless) == (2, 2, 0 if role == 'head' else 1, role == 'worker')
    assert args.distributed_executor_backend == 'mp' and args.master_addr == '127.0.0.1' and args.master_port == 25000
    assert args.speculative_config == {'method': 'dspark', 'num_speculative_tokens': 5, 'draft_sample_method': 'probabilistic'}
    assert (args.max_model_len, args.max_num_seqs, args.max_cudagraph_capture_size, args.gpu_memory_utilization) == (1048576, 6, 36, 0.835)
    assert args.enable_chunked_prefill is True and args.async_scheduling is True and args.enable_prefix_caching is True
    assert config_problems(args) == []


@pytest.mark.parametrize('extra,problem', [
    (['--nnodes', '2', '--node-rank', '0', '--headless', '-tp', '2', '--distributed-executor-backend', 'mp'], '--headless on node rank 0'),
    (['--nnodes', '2', '--node-rank', '1', '-tp', '2', '--distributed-executor-backend', 'mp'], 'node rank 1 runs without --headless'),
    (['--nnodes', '2', '--node-rank', '1', '--headless', '-tp', '4', '--distributed-executor-backend', 'mp'], 'needs 2 GPU(s) per node'),
    (['--nnodes', '2', '--node-rank', '1', '--headless', '-tp', '2', '--distributed-executor-backend', 'ray'], 'mp backend only'),
    (['--max-model-len', '2M'], 'User-specified max_model_len (2097152) is greater than the derived max_model_len'),
    (['--gpu-memory-utilization', '1.2'], '--gpu-memory-utilization is 1.2'),
    (['--speculative-config', '{"method":"dspark","num_speculative_tokens":0}'], 'num_speculative_tokens is 0'),
], ids=['headless-head', 'worker-not-headless', 'tp-over-gpus', 'ray', 'len', 'util', 'spec'])
def test_start_up_problems(tmp_path, extra, problem):
    args = build_parser().parse_args(['serve', MODEL, *extra])
    assert any(problem in p for p in config_problems(args)), config_problems(args)
    if extra[0] == '--nnodes' and '--headless' in extra and '0' in extra:   # one of them end to end
        proc = run_cli(tmp_path, 'serve', MODEL, *extra)
        assert proc.returncode == 1 and 'ValueError: ' + problem in proc.stderr


# ---------------------------------------------------------------------------- environment checks

@pytest.mark.parametrize('env,warns', [
    ({}, False),
    ({'NCCL_IB_HCA': '=rocep1s0f1', 'NCCL_IB_GID_INDEX': '3'}, False),
    ({'NCCL_IB_HCA': '=rocep1s0f1', 'NCCL_IB_GID_INDEX': ''}, 'set but empty'),
    ({'NCCL_IB_HCA': '=rocep1s0f1'}, 'is unset while NCCL_IB_HCA'),
    ({'NCCL_IB_HCA': '=rocep1s0f1', 'NCCL_IB_ADDR_FAMILY': 'AF_INET'}, False),
    ({'NCCL_IB_HCA': '=rocep1s0f1', 'NCCL_IB_GID_INDEX': 'three'}, "NCCL_IB_GID_INDEX is 'three'"),
])
def test_nccl_gid_index_warnings(env, warns):
    warnings = checks.nccl_warnings(env)
    assert (warnings == []) if not warns else (len(warnings) == 1 and warns in warnings[0])


def make_cache(root: Path, ref: Optional[str] = SHA, config: bool = True) -> Path:
    repo = root / 'hub' / 'models--deepseek-ai--DeepSeek-V4-Flash-0731'
    snap = repo / 'snapshots' / SHA
    snap.mkdir(parents=True)
    if config:
        (snap / 'config.json').write_text('{}')
    if ref is not None:
        (repo / 'refs').mkdir()
        (repo / 'refs' / 'main').write_text(ref)
    return repo


@pytest.mark.parametrize('revision,ref,config,problem', [
    (SHA, SHA, True, None),
    (None, SHA, True, None),
    (None, SHA + '\n', True, 'refs/main ends with a newline'),
    (None, None, True, 'refs/main does not exist'),
    ('0' * 40, SHA, True, "no snapshot '%s'" % ('0' * 40)),
    (SHA, SHA, False, 'has no config.json'),
])
def test_hf_cache_lookup(tmp_path, revision, ref, config, problem):
    make_cache(tmp_path, ref, config)
    found = checks.hf_cache_problem(MODEL, revision, {'HF_HOME': str(tmp_path)})
    assert (found is None) if problem is None else (problem in found), found
    assert checks.hf_cache_problem(MODEL, revision, {'HF_HUB_CACHE': str(tmp_path / 'hub')}) == found


def test_offline_without_the_model_refuses_to_start_and_warns_about_nccl(tmp_path):
    port, master = free_port(), free_port()
    proc = Proc(tmp_path, 'offline', argv('head', port, master),
                {'HF_HUB_OFFLINE': '1', 'HF_HOME': str(tmp_path / 'hf'), 'NCCL_IB_HCA': '=rocep1s0f1', 'NCCL_IB_GID_INDEX': ''})
    assert proc.wait() == 1
    err = proc.err.read_text()
    assert 'NCCL_IB_GID_INDEX is set but empty while NCCL_IB_HCA==rocep1s0f1' in err
    assert 'LocalEntryNotFoundError' in err and 'models--deepseek-ai--DeepSeek-V4-Flash-0731 does not exist' in err


def test_offline_with_the_model_in_the_cache_starts(tmp_path):
    make_cache(tmp_path / 'hf')
    proc = Proc(tmp_path, 'cached', [sys.executable, '-m', 'vllm', 'serve', MODEL, '--revision', SHA, '--port', str(free_port()),
                                     '--host', '127.0.0.1'], {'HF_HUB_OFFLINE': '1', 'HF_HOME': str(tmp_path / 'hf')})
    try:
        deadline = time.monotonic() + 10
        while 'Application startup complete.' not in proc.log():
            assert proc.popen.poll() is None and time.monotonic() < deadline, proc.log()
            time.sleep(0.1)
    finally:
        proc.stop()
    assert proc.popen.returncode == 0


# ---------------------------------------------------------------------------- the pair

def test_pair_serves_models(pair):
    _head, _worker, port = pair
    status, body = request(port, '/v1/models')
    assert status == 200
    models = json.loads(body)['data']
    assert [(m['id'], m['max_model_len'], m['root']) for m in models] == [(SERVED, 1048576, MODEL)]


def test_pair_one_token_completion(pair):
    _head, _worker, port = pair
    status, body = request(port, '/v1/completions', {'model': SERVED, 'prompt': 'ping', 'max_tokens': 1})
    assert status == 200, body
    answer = json.loads(body)
    assert answer['choices'][0]['finish_reason'] == 'length' and answer['usage']['completion_tokens'] == 1
    assert answer['choices'][0]['text']


def test_pair_chat_completion(pair):
    _head, _worker, port = pair
    body = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'What is 47 x 89?'}], 'temperature': 0, 'max_tokens': 64}
    status, body = request(port, '/v1/chat/completions', body)
    assert status == 200, body
    answer = json.loads(body)
    assert answer['object'] == 'chat.completion' and answer['choices'][0]['message']['role'] == 'assistant'
    assert answer['choices'][0]['finish_reason'] == 'stop'
    usage = answer['usage']
    assert usage['completion_tokens'] > 1 and usage['total_tokens'] == usage['prompt_tokens'] + usage['completion_tokens']
    assert answer['choices'][0]['message']['content']


def test_pair_streaming_with_usage(pair):
    _head, _worker, port = pair
    status, body = request(port, '/v1/chat/completions', {
        'model': SERVED, 'messages': [{'role': 'user', 'content': 'Explain paged attention.'}], 'max_tokens': 12,
        'stream': True, 'stream_options': {'include_usage': True}})
    assert status == 200
    events = [line[len('data: '):] for line in body.decode().splitlines() if line.startswith('data: ')]
    assert events[-1] == '[DONE]'
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]['choices'][0]['delta']['role'] == 'assistant'
    text = ''.join(c['choices'][0]['delta'].get('content', '') for c in chunks if c['choices'])
    assert text
    assert [c['choices'][0]['finish_reason'] for c in chunks if c['choices']][-1] == 'length'
    usage = chunks[-1]
    assert usage['choices'] == [] and usage['usage']['completion_tokens'] == 12
    assert usage['usage']['total_tokens'] == usage['usage']['prompt_tokens'] + 12
    # DSpark packs several tokens per frame: fewer content frames than tokens
    assert len([c for c in chunks if c['choices'] and c['choices'][0]['delta'].get('content')]) < 12


def test_pair_streaming_without_usage(pair):
    _head, _worker, port = pair
    status, body = request(port, '/v1/completions', {'model': SERVED, 'prompt': 'x', 'max_tokens': 5, 'stream': True})
    chunks = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith('data: {')]
    assert status == 200 and all('usage' not in c for c in chunks)
    assert ''.join(c['choices'][0]['text'] for c in chunks)


def test_pair_api_key(pair):
    _head, _worker, port = pair
    assert request(port, '/v1/models', key=None) == (401, b'{"error": "Unauthorized"}')
    assert request(port, '/v1/models', key='wrong')[0] == 401
    assert request(port, '/v1/completions', {'prompt': 'x', 'max_tokens': 1}, key=None)[0] == 401
    assert request(port, '/health', key=None) == (200, b'')
    assert request(port, '/metrics', key=None)[0] == 200


def test_pair_routes_outside_v1_answer_without_the_key(pair):
    """The attack the API proxy stops (issue 24, finding 6): vLLM checks the key under /v1 only, so whoever reaches
    its port generates text through /invocations (the SageMaker router) and tokenizes without it."""
    _head, _worker, port = pair
    status, body = request(port, '/invocations', {'model': SERVED, 'prompt': 'x', 'max_tokens': 2}, key=None)
    assert status == 200 and json.loads(body)['object'] == 'text_completion', body
    status, body = request(port, '/invocations', {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}],
                                                  'max_tokens': 2}, key=None)
    assert status == 200 and json.loads(body)['object'] == 'chat.completion', body
    status, body = request(port, '/invocations', {'input': 'x'}, key=None)
    assert status == 400 and 'Cannot find suitable handler' in json.loads(body)['error']['message']
    status, body = request(port, '/tokenize', {'prompt': 'one two three'}, key=None)
    reply = json.loads(body)
    assert status == 200 and reply['count'] == len(reply['tokens']) > 0 and reply['max_model_len'] == 1048576, body
    assert request(port, '/detokenize', {'tokens': [1, 2]}, key=None)[0] == 200


def test_pair_request_errors(pair):
    _head, _worker, port = pair
    status, body = request(port, '/v1/completions', {'model': 'gpt-4', 'prompt': 'x', 'max_tokens': 1})
    assert status == 404 and json.loads(body)['error']['message'] == 'The model `gpt-4` does not exist.'
    status, body = request(port, '/v1/completions', {'model': SERVED, 'prompt': 'x', 'max_tokens': 2000000})
    assert status == 400 and "maximum context length is 1048576 tokens" in json.loads(body)['error']['message']


def test_pair_metrics_count_spec_decode(pair):
    _head, _worker, port = pair
    names = ('vllm:spec_decode_num_drafts_total', 'vllm:spec_decode_num_draft_tokens_total',
             'vllm:spec_decode_num_accepted_tokens_total', 'vllm:generation_tokens_total')
    before_text = request(port, '/metrics', key=None)[1].decode()
    before = {n: metric(before_text, n) for n in names}
    assert request(port, '/v1/completions', {'model': SERVED, 'prompt': 'warm up', 'max_tokens': 20})[0] == 200
    after_text = request(port, '/metrics', key=None)[1].decode()
    after = {n: metric(after_text, n) for n in names}
    drafts = after['vllm:spec_decode_num_drafts_total'] - before['vllm:spec_decode_num_drafts_total']
    drafted = after['vllm:spec_decode_num_draft_tokens_total'] - before['vllm:spec_decode_num_draft_tokens_total']
    accepted = after['vllm:spec_decode_num_accepted_tokens_total'] - before['vllm:spec_decode_num_accepted_tokens_total']
    assert drafts > 0 and drafted == 5 * drafts and 0 < accepted < drafted
    assert after['vllm:generation_tokens_total'] - before['vllm:generation_tokens_total'] == 20
    assert 1 + drafts + accepted == 20      # first token from the prefill, then (accepted + 1) per step
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="%s",position="4"}' % SERVED in after_text


def test_pair_worker_logs_ready(pair):
    _head, worker, _port = pair
    assert 'Node rank 1 ready' in worker.log()


# ---------------------------------------------------------------------------- rendezvous failures

def test_head_alone_never_becomes_ready(tmp_path):
    port, master = free_port(), free_port()
    head = Proc(tmp_path, 'head', argv('head', port, master))
    try:
        # On the condition, not after a fixed sleep: under load the head may take more than a second to reach its
        # rendezvous, and a SIGTERM before its handlers are installed would end it with -15 instead of 0.
        deadline = time.monotonic() + 60
        while 'waiting for 1 worker node(s)' not in head.log():
            assert head.popen.poll() is None and time.monotonic() < deadline, head.log()
            time.sleep(0.05)
        with pytest.raises(OSError):
            request(port, '/v1/models', timeout=1.0)
        assert head.popen.poll() is None
        head.popen.send_signal(signal.SIGTERM)
        assert head.wait() == 0
    finally:
        head.stop()


def _post_later(port: int, path: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """POST in a thread; the dict gets 'status'/'body' or 'error', and 'seconds'."""
    import threading
    out: Dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out['status'], out['body'] = request(port, path, body, timeout=timeout)
        except OSError as exc:
            out['error'] = exc
        out['seconds'] = time.monotonic() - t0
    out['thread'] = threading.Thread(target=run, daemon=True)
    out['thread'].start()
    return out


def _wait_for(proc: Proc, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in proc.log():
        assert time.monotonic() < deadline, 'no %r in:\n%s' % (text, proc.log())
        time.sleep(0.05)


HANG_ENV = {'VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS': '3', 'VLLM_RINGBUFFER_WARNING_INTERVAL': '1'}
ONE_TOKEN = {'model': SERVED, 'prompt': 'x', 'max_tokens': 1}
ONE_CHAT = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'x'}], 'max_tokens': 1}


@pytest.mark.parametrize('exit_zero', [False, True], ids=['exit-1', 'exit-zero-knob'])
def test_a_lost_worker_hangs_requests_until_the_execute_model_timeout(tmp_path, exit_zero):
    """Real vLLM's head does not notice a worker node that is gone: /health, /v1/models and /metrics answer, the head
    logs nothing; requests (completions and chat) wait, the engine core logs shm_broadcast's wait line every
    VLLM_RINGBUFFER_WARNING_INTERVAL s, and VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS after the first waiting request it dies:
    the waiting requests get 500 (EngineDeadError), /health 503, and the process exits."""
    env = dict(HANG_ENV, **({'VLLM_STANDIN_EXIT_ZERO_ON_PEER_LOSS': '1'} if exit_zero else {}))
    head, worker, port = start_pair(tmp_path, env)
    try:
        wait_ready(port, [head, worker])
        at_loss = head.mark()
        worker.popen.kill()
        worker.wait()
        time.sleep(1.0)
        assert head.popen.poll() is None
        assert head.since(at_loss) == []                                # nothing in the head's log
        assert request(port, '/health', key=None) == (200, b'')
        assert request(port, '/v1/models')[0] == 200 and request(port, '/metrics', key=None)[0] == 200
        waiting = _post_later(port, '/v1/completions', ONE_TOKEN, timeout=15)
        time.sleep(0.3)
        with pytest.raises(OSError):                                   # what a 1-token check sees and /health does not
            request(port, '/v1/chat/completions', ONE_CHAT, timeout=1.0)
        assert request(port, '/health', key=None) == (200, b'')
        waiting['thread'].join(15)
        assert waiting.get('status') == 500, waiting
        assert b'EngineDeadError' in waiting['body']
        assert 2.5 <= waiting['seconds'] <= 6, waiting['seconds']      # the timeout counts from the first waiting request
        assert head.wait(5) == (0 if exit_zero else 1)
        log = head.log()
        assert 'No available shared memory broadcast block found in 1 seconds' in log
        assert '(EngineCore pid=' in log and 'TimeoutError: RPC call to sample_tokens timed out.' in log
        assert 'EngineDeadError: EngineCore encountered an issue' in log
        assert 'Application shutdown complete.' in log
    finally:
        head.stop()
        worker.stop()


def test_a_lost_worker_without_requests_leaves_the_head_up(tmp_path):
    """The execute-model timeout runs only while a model step waits: an idle head stays up and answers /health.
    A worker started again cannot rejoin the formed engine: it stops, and the head logs nothing of it."""
    env = dict(HANG_ENV, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='1')
    head, worker, port = start_pair(tmp_path, env)
    again = None
    try:
        wait_ready(port, [head, worker])
        at_loss = head.mark()
        worker.popen.kill()
        time.sleep(2.5)
        assert head.popen.poll() is None, head.log()
        assert request(port, '/health', key=None) == (200, b'')
        assert 'shared memory broadcast' not in head.log()
        again = Proc(tmp_path, 'worker-again', list(worker.popen.args), env)
        assert again.wait(10) == 1
        assert 'cannot rejoin a running engine' in again.log()
        assert not [line for line in head.since(at_loss) if 'ERROR' in line] and head.popen.poll() is None
    finally:
        head.stop()
        worker.stop()
        if again is not None:
            again.stop()


def test_a_paused_worker_that_answers_again_lets_the_requests_finish(tmp_path):
    """A silent worker (a paused node) stalls the engine; once its heartbeat is back the waiting request answers."""
    head, worker, port = start_pair(tmp_path, dict(HANG_ENV, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='30',
                                                   VLLM_STANDIN_PEER_TIMEOUT='1'))
    try:
        wait_ready(port, [head, worker])
        worker.popen.send_signal(signal.SIGSTOP)
        time.sleep(2.0)
        waiting = _post_later(port, '/v1/completions', ONE_TOKEN, timeout=20)
        time.sleep(1.5)
        assert 'status' not in waiting and 'error' not in waiting, waiting
        worker.popen.send_signal(signal.SIGCONT)
        waiting['thread'].join(20)
        assert waiting.get('status') == 200, (waiting, head.log())
        assert head.popen.poll() is None and worker.popen.poll() is None
        assert request(port, '/v1/chat/completions', ONE_CHAT)[0] == 200
    finally:
        worker.popen.send_signal(signal.SIGCONT)
        head.stop()
        worker.stop()


def test_crashed_worker_can_exit_zero_like_seed_000(tmp_path):
    head, worker, port = start_pair(tmp_path, {'VLLM_STANDIN_CRASH_EXIT_CODE': '0'})
    try:
        wait_ready(port, [head, worker])
        worker.popen.send_signal(signal.SIGUSR1)
        assert worker.wait() == 0                     # Restart=on-failure would not restart it
        assert 'device-side assert triggered' in worker.log()
        time.sleep(1.0)
        assert head.popen.poll() is None              # the head does not notice (no request waits)
    finally:
        head.stop()
        worker.stop()


def test_mismatched_engine_arguments_fail_both(tmp_path):
    head, worker, _port = start_pair(tmp_path, worker_knobs={'max_num_seqs': 4})
    try:
        assert head.wait() == 1 and worker.wait() == 1
        assert 'engine arguments differ between node rank 0 and node rank 1' in head.log()
        assert 'max_cudagraph_capture_size: 36 != 24' in head.log() and 'max_num_seqs: 6 != 4' in head.log()
        assert 'the head rejected node rank 1' in worker.log()
    finally:
        head.stop()
        worker.stop()


# ---------------------------------------------------------------------------- packaging

def _backend():
    spec = importlib.util.spec_from_file_location('standin_build', STANDIN / '_build' / 'standin_build.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheel_has_the_package_and_the_console_script(tmp_path):
    name = _backend().build_wheel(str(tmp_path))
    assert name == 'vllm-0.27.1+spark.sim-py3-none-any.whl'
    with zipfile.ZipFile(tmp_path / name) as zf:
        names = set(zf.namelist())
        assert {'vllm/__init__.py', 'vllm/cli.py', 'vllm/server.py', 'vllm/rendezvous.py', 'vllm/checks.py'} <= names
        assert zf.read('vllm-0.27.1+spark.sim.dist-info/entry_points.txt').decode() == '[console_scripts]\nvllm = vllm.cli:main\n'
        assert 'Version: 0.27.1+spark.sim' in zf.read('vllm-0.27.1+spark.sim.dist-info/METADATA').decode()
        assert not [n for n in names if '__pycache__' in n]


@pytest.mark.integration
def test_pip_installs_it_without_network(tmp_path):
    target = tmp_path / 'site'
    proc = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-index', '--quiet', '--target', str(target), str(STANDIN)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([str(target / 'bin' / 'vllm'), '--version'], capture_output=True, text=True,
                         env={'PYTHONPATH': str(target), 'PATH': os.environ.get('PATH', '')}, timeout=20, check=False)
    assert out.stdout.strip() == '0.27.1+spark.sim'
