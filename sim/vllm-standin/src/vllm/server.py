"""The OpenAI-compatible API of the head, with a fake engine and vLLM's Prometheus metrics.

Routes: GET /health, /ping, /version, /metrics, /v1/models; POST
/v1/chat/completions and /v1/completions (non-streaming and SSE streaming, a
final usage chunk with stream_options.include_usage). /v1/* wants
``Authorization: Bearer <key>`` when VLLM_API_KEY (or --api-key) is set, as in
vLLM; /health, /metrics and /version stay open.

The engine "generates" token by token, in DSpark steps: the first token from the
prefill, then steps that draft ``k`` tokens (num_speculative_tokens) and accept a
deterministic number of them, so the spec-decode counters move like the real ones.
What it answers (block markers, needles, tool calls, reasoning, logprobs), its
prefill and decode rates and its fault modes live in engine.py.
"""

from __future__ import annotations

import hmac
import json
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from vllm import __version__, log
from vllm import engine as behaviour

REPLY = ('The spark-sim vLLM stand-in answered this request without a GPU and without a model; '
         'every token here is scripted, not generated.')
_TOKEN_RE = re.compile(r'\s*\w+|\s*[^\w\s]')
REPLY_TOKENS = _TOKEN_RE.findall(REPLY)
ACCEPT_PATTERN = (3, 1, 4, 2, 0, 3, 2, 1)   # accepted draft tokens per DSpark step, clipped to k


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text or ''))


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = 'BadRequestError', param: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param

    def body(self) -> Dict[str, Any]:
        return {'error': {'message': self.message, 'type': self.kind, 'param': self.param, 'code': self.status}}


SHM_WAIT = ('No available shared memory broadcast block found in %d seconds. This typically happens when some processes '
            'are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).')
ENGINE_DEAD = 'EngineCore encountered an issue. See stack trace (above) for the root cause.'
KV_CAPACITY_TOKENS = 2493464   # GPU KV cache size at --gpu-memory-utilization 0.835 (seed 004; cli.kv_cache_lines)


class Engine:
    """Counters, the scripted generation, and the engine's wait on a rank that is gone.

    A worker node the head lost (its connection closed) or that stopped answering (stalled) is
    ``down``. Real vLLM's head notices neither: its worker monitor watches only the processes of
    its own node, /health answers 200 until the engine core dies (sim/SOURCES.md, "vLLM stand-in:
    lost worker"). So while a rank is down every request waits (the model step's collective
    never completes); from the first waiting request on, every ``warn_interval`` seconds the
    engine core logs shm_broadcast's "No available shared memory broadcast block" line, and at
    ``execute_timeout`` (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) it dies: "TimeoutError: RPC call to
    sample_tokens timed out.", EngineDeadError, the waiting requests get 500, /health 503, and
    ``on_dead`` ends the process. A stalled rank that answers again lets the waiting requests go on.
    """

    def __init__(self, model: str, served_names: List[str], max_model_len: int, num_spec_tokens: int,
                 step_seconds: float = 0.0, execute_timeout: float = 300.0, warn_interval: float = 60.0,
                 on_dead: Optional[Callable[[], None]] = None, chunk_tokens: int = behaviour.CHUNK_TOKENS,
                 kv_capacity_tokens: int = KV_CAPACITY_TOKENS):
        self.model = model
        self.served_names = served_names
        self.max_model_len = max_model_len
        self.k = num_spec_tokens
        self.step_seconds = step_seconds
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: Dict[str, int] = {'stop': 0, 'length': 0, 'abort': 0}
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.accepted_per_pos = [0] * max(self.k, 0)
        self.dead = threading.Event()      # the engine core died (EngineDeadError): 500s, /health 503, the process ends
        self.stopping = threading.Event()
        self.sched = behaviour.Scheduler(chunk_tokens=chunk_tokens)
        self.kv_capacity_tokens = max(1, int(kv_capacity_tokens))
        self.chat_problem: Optional[str] = None   # why chat cannot render a prompt (chat_template.py): HTTP 400
        self.execute_timeout = execute_timeout
        self.warn_interval = warn_interval
        self.on_dead = on_dead
        self.gate = threading.Condition()
        self.down: Dict[int, str] = {}     # node rank -> 'lost' | 'stalled'
        self.blocked_since: Optional[float] = None
        self._watching = False
        # The wedge fault hits a running engine only (engine.py): follow the state file so that a clear between two
        # `spark-sim fault HOST wedge` is seen even when no request asks.
        threading.Thread(target=self._follow_faults, name='fault-follower', daemon=True).start()

    def _follow_faults(self) -> None:
        while not self.stopping.wait(0.2):
            self.sched.wedged()

    # ------------------------------------------------------------------ a rank that is gone
    def rank_down(self, rank: int, how: str) -> None:
        """Node ``rank`` is lost (its connection closed: for good) or stalled (silent: until it answers)."""
        with self.gate:
            if self.down.get(rank) != 'lost':
                self.down[rank] = how
            self.gate.notify_all()

    def rank_up(self, rank: int) -> None:
        """A stalled rank answers again (a lost one never comes back)."""
        with self.gate:
            if self.down.get(rank) == 'stalled':
                del self.down[rank]
            if not self.down:
                self.blocked_since = None
            self.gate.notify_all()

    def wait_engine(self) -> None:
        """Return when no rank is down; raise a 500 once the engine core died (or the server stops)."""
        with self.gate:
            while True:
                if self.dead.is_set():
                    raise ApiError(500, ENGINE_DEAD, 'EngineDeadError')
                if self.stopping.is_set():
                    raise ApiError(500, 'the server is shutting down', 'InternalServerError')
                if not self.down and not self.sched.wedged():
                    self.blocked_since = None
                    return
                if self.blocked_since is None:
                    self.blocked_since = time.monotonic()   # the step's RPC starts waiting now
                    if not self._watching:
                        self._watching = True
                        threading.Thread(target=self._watch, name='engine-core-rpc', daemon=True).start()
                self.gate.wait(0.2)

    def _watch(self) -> None:
        warned = 0
        while not self.stopping.wait(0.05):
            with self.gate:
                since = self.blocked_since
            if since is None:
                warned = 0
                continue
            waited = time.monotonic() - since
            if waited >= self.execute_timeout:
                self._die()
                return
            if self.warn_interval > 0 and waited >= (warned + 1) * self.warn_interval:
                warned += 1
                log.info('shm', SHM_WAIT, int(self.warn_interval), proc='EngineCore')

    def _die(self) -> None:
        log.error('core', 'EngineCore encountered a fatal error.', proc='EngineCore')
        log.error('core', 'TimeoutError: RPC call to sample_tokens timed out.', proc='EngineCore')
        log.error('async_llm', 'AsyncLLM output_handler failed.')
        log.error('async_llm', 'vllm.v1.engine.exceptions.EngineDeadError: %s', ENGINE_DEAD)
        with self.gate:
            self.dead.set()
            self.gate.notify_all()
        if self.on_dead is not None:
            self.on_dead()

    def steps(self, n_tokens: int, gen: Optional[behaviour.Generation] = None) -> Iterator[List[str]]:
        """The tokens of a reply of ``n_tokens``, grouped by engine step (prefill, then DSpark steps)."""
        source = gen.prefill(self.stopping) if gen is not None else REPLY_TOKENS
        tokens = [source[i % len(source)] for i in range(n_tokens)] if source else []
        if not tokens:
            return
        if self.down or self.dead.is_set() or self.sched.wedged():
            try:
                self.wait_engine()      # the prefill's last step waits on a rank that is gone, or a wedged engine
            except ApiError:
                return
        self._count(gen, tokens[:1], prompt=True)
        yield tokens[:1]
        if gen is not None:
            gen.first_token_sent()
        emitted, step = 1, 0
        counts = behaviour.accepted_counts(gen.reply.acceptance, self.k) if gen is not None else None
        while emitted < n_tokens:
            if self.k > 0:
                planned = next(counts) if counts is not None else ACCEPT_PATTERN[step % len(ACCEPT_PATTERN)]
                accepted = min(planned, self.k, n_tokens - emitted - 1)
                with self.lock:
                    self.drafts += 1
                    self.draft_tokens += self.k
                    self.accepted += accepted
                    for pos in range(accepted):
                        self.accepted_per_pos[pos] += 1
            else:
                accepted = 0
            take = accepted + 1
            if self.step_seconds:
                time.sleep(self.step_seconds)
            if self.down or self.dead.is_set() or self.sched.wedged():
                try:
                    self.wait_engine()      # a rank went away (or the engine wedged) mid-generation: the next step waits
                except ApiError:
                    return
            if gen is not None:
                gen.pace(emitted + take - 1)
            self._count(gen, tokens[emitted:emitted + take])
            yield tokens[emitted:emitted + take]
            emitted += take
            step += 1

    def admit(self, body: Dict[str, Any], prompt_tokens: int, natural: int = len(REPLY_TOKENS)) -> Tuple[int, str]:
        """Validate a request; returns (tokens to generate, finish_reason)."""
        model = body.get('model')
        if model is not None and model not in self.served_names:
            raise ApiError(404, 'The model `%s` does not exist.' % (model,), 'NotFoundError', 'model')
        max_tokens = body.get('max_completion_tokens', body.get('max_tokens'))
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ApiError(400, 'max_tokens must be at least 1, got %r.' % (max_tokens,), param='max_tokens')
        room = self.max_model_len - prompt_tokens
        if room < 1 or (max_tokens is not None and max_tokens > room):
            raise ApiError(400, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the "
                           'messages, %d in the completion). Please reduce the length of the messages or completion.'
                           % (self.max_model_len, prompt_tokens + (max_tokens or 0), prompt_tokens, max_tokens or 0))
        limit = min(max_tokens if max_tokens is not None else natural, room)
        if limit < natural:
            return limit, 'length'
        return natural, 'stop'

    def begin(self) -> None:
        """Admit a request to the engine: it counts as running while it waits on a rank that is gone."""
        with self.lock:
            self.running += 1
        try:
            self.wait_engine()
        except ApiError:
            with self.lock:
                self.running -= 1
            raise

    def _count(self, gen: Optional[behaviour.Generation], step: List[str], prompt: bool = False) -> None:
        """Count a step's tokens as the engine emits them; the prompt once, with the first token (vLLM's
        IterationStats.update_from_output: ``if is_prefilling: num_prompt_tokens += prompt_len``)."""
        if gen is None:
            return
        with self.lock:
            if prompt and not gen.prompt_counted:
                gen.prompt_counted = True
                self.prompt_tokens += gen.prompt_tokens
            gen.generated += len(step)
            self.generation_tokens += len(step)

    def finish(self, prompt_tokens: int, completion_tokens: int, finish_reason: str,
               gen: Optional[behaviour.Generation] = None) -> None:
        """A request ends: what its steps did not count yet is counted now."""
        with self.lock:
            self.running -= 1
            self.prompt_tokens += 0 if gen is not None and gen.prompt_counted else prompt_tokens
            self.generation_tokens += max(0, completion_tokens - (gen.generated if gen is not None else 0))
            self.success[finish_reason] = self.success.get(finish_reason, 0) + 1

    def metrics(self) -> str:
        name = self.served_names[0]
        labels = 'engine="0",model_name="%s"' % name
        out: List[str] = []

        def metric(metric_name: str, kind: str, help_text: str, samples: List[Tuple[str, float]]) -> None:
            out.append('# HELP %s %s' % (metric_name, help_text))
            out.append('# TYPE %s %s' % (metric_name, kind))
            for extra, value in samples:
                out.append('%s{%s%s} %s' % (metric_name, labels, extra, float(value)))

        kv_usage = min(1.0, self.sched.held_tokens() / self.kv_capacity_tokens)   # the scheduler's gauge, every step
        with self.lock:
            metric('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', [('', self.running)])
            metric('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', [('', 0)])
            metric('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', [('', kv_usage)])
            metric('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', [('', self.prompt_tokens)])
            metric('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.',
                   [('', self.generation_tokens)])
            metric('vllm:request_success_total', 'counter', 'Count of successfully processed requests.',
                   [(',finished_reason="%s"' % reason, count) for reason, count in sorted(self.success.items())])
            if self.k > 0:
                metric('vllm:spec_decode_num_drafts_total', 'counter', 'Number of spec decoding drafts.', [('', self.drafts)])
                metric('vllm:spec_decode_num_draft_tokens_total', 'counter', 'Number of draft tokens.', [('', self.draft_tokens)])
                metric('vllm:spec_decode_num_accepted_tokens_total', 'counter', 'Number of accepted tokens.', [('', self.accepted)])
                metric('vllm:spec_decode_num_accepted_tokens_per_pos_total', 'counter', 'Accepted tokens per draft position.',
                       [(',position="%d"' % pos, count) for pos, count in enumerate(self.accepted_per_pos)])
        return '\n'.join(out) + '\n'


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return ' '.join(part.get('text', '') for part in content if isinstance(part, dict))
    return ''


def _chat_prompt_tokens(body: Dict[str, Any]) -> int:
    messages = body.get('messages')
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, 'messages must be a non-empty list of {role, content}.', param='messages')
    total = 3
    for message in messages:
        if not isinstance(message, dict) or 'role' not in message:
            raise ApiError(400, 'each message needs a role.', param='messages')
        total += 4 + count_tokens(_message_text(message.get('content')))
    return total


def _completion_prompt_tokens(body: Dict[str, Any]) -> int:
    prompt = body.get('prompt')
    if isinstance(prompt, list):
        if prompt and all(isinstance(t, int) for t in prompt):
            return len(prompt)
        prompt = ' '.join(p for p in prompt if isinstance(p, str))
    if not isinstance(prompt, str):
        raise ApiError(400, 'prompt must be a string, a list of strings or a list of token ids.', param='prompt')
    return max(1, count_tokens(prompt))


def _invocation_is_chat(body: Dict[str, Any]) -> bool:
    """Which request /invocations takes a body for: the first of vLLM's INVOCATION_TYPES that validates it
    (ChatCompletionRequest needs messages, CompletionRequest a prompt; the pooling types have no handler on a
    generative model)."""
    if isinstance(body.get('messages'), list):
        return True
    if 'prompt' in body:
        return False
    raise ApiError(400, "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', "
                        "'CompletionRequest']")


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'uvicorn'
    sys_version = ''
    engine: Engine
    api_keys: List[str]

    # ------------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    def _access(self, status: int) -> None:
        phrase = {200: 'OK', 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 405: 'Method Not Allowed',
                  500: 'Internal Server Error', 503: 'Service Unavailable'}.get(status, '')
        log.info('access', '%s:%d - "%s %s %s" %d %s', self.client_address[0], self.client_address[1], self.command,
                 self.path, self.request_version, status, phrase)

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access(status)

    def _text(self, status: int, text: str, content_type: str = 'text/plain; charset=utf-8') -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access(status)

    def _authorized(self) -> bool:
        if not self.api_keys or not self.path.startswith('/v1'):
            return True
        header = self.headers.get('Authorization', '')
        if not header.startswith('Bearer '):
            return False
        given = header[len('Bearer '):].encode()
        return any(hmac.compare_digest(given, key.encode()) for key in self.api_keys)

    def _body(self) -> Dict[str, Any]:
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        try:
            body = json.loads(raw.decode() or 'null')
        except (UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, 'the request body is not valid JSON: %s' % exc)
        if not isinstance(body, dict):
            raise ApiError(400, 'the request body must be a JSON object')
        return body

    # ------------------------------------------------------------------ routes
    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        path = self.path.split('?', 1)[0]
        if not self._authorized():
            self._json(401, {'error': 'Unauthorized'})
        elif path in ('/health', '/ping'):
            self._text(503 if self.engine.dead.is_set() else 200, '')    # 503 only on EngineDeadError
        elif path == '/version':
            self._json(200, {'version': __version__})
        elif path == '/metrics':
            self._text(200, self.engine.metrics(), 'text/plain; version=0.0.4; charset=utf-8')
        elif path == '/v1/models':
            self._json(200, {'object': 'list', 'data': [
                {'id': name, 'object': 'model', 'created': self.engine.created, 'owned_by': 'vllm', 'root': self.engine.model,
                 'parent': None, 'max_model_len': self.engine.max_model_len,
                 'permission': [{'id': 'modelperm-%s' % uuid.uuid4().hex, 'object': 'model_permission',
                                 'created': self.engine.created, 'allow_create_engine': False, 'allow_sampling': True,
                                 'allow_logprobs': True, 'allow_search_indices': False, 'allow_view': True,
                                 'allow_fine_tuning': False, 'organization': '*', 'group': None, 'is_blocking': False}]}
                for name in self.engine.served_names]})
        elif path in ('/v1/chat/completions', '/v1/completions'):
            self._json(405, {'detail': 'Method Not Allowed'})
        else:
            self._json(404, {'detail': 'Not Found'})

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        path = self.path.split('?', 1)[0]
        if not self._authorized():
            self.rfile.read(int(self.headers.get('Content-Length') or 0))
            self._json(401, {'error': 'Unauthorized'})
            return
        if path in ('/tokenize', '/detokenize'):
            self._tokenize(path)
            return
        # /invocations: vLLM's SageMaker router (vllm/entrypoints/sagemaker/routes.py) serves chat and completions
        # outside /v1, so the /v1-only key check of the version the recipe runs never asks for the key there.
        invocation = path == '/invocations'
        if not invocation and path not in ('/v1/chat/completions', '/v1/completions'):
            self.rfile.read(int(self.headers.get('Content-Length') or 0))
            self._json(404 if path not in ('/health', '/v1/models', '/metrics') else 405,
                       {'detail': 'Not Found' if path not in ('/health', '/v1/models', '/metrics') else 'Method Not Allowed'})
            return
        chat = path == '/v1/chat/completions'
        arrived = time.monotonic()
        try:
            body = self._body()
            if invocation:
                chat = _invocation_is_chat(body)
            if chat and self.engine.chat_problem:
                raise ApiError(400, self.engine.chat_problem)   # vLLM 0.27.1 safe_apply_chat_template -> BadRequestError
            prompt_tokens = _chat_prompt_tokens(body) if chat else _completion_prompt_tokens(body)
            reply = behaviour.plan(body, chat, REPLY_TOKENS, self.engine.sched.conditions.faults())
            natural = len(reply.render(False))
            budget = body.get('max_completion_tokens', body.get('max_tokens'))
            if body.get('ignore_eos') is True and isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
                natural = budget + 1    # generate to the limit (finish_reason "length")
            n_tokens, finish_reason = self.engine.admit(body, prompt_tokens, natural)
            if reply.tool and finish_reason == 'stop':
                finish_reason = 'tool_calls'
            self.engine.begin()
        except ApiError as exc:
            self._json(exc.status, exc.body())
            return
        finished = []
        current: List[behaviour.Generation] = []

        def finish() -> None:
            # The engine counts the request before its output reaches the client, as vLLM's output
            # processor does: a /metrics read right after the reply already includes it.
            if not finished:
                finished.append(True)
                self.engine.finish(prompt_tokens, n_tokens, finish_reason, current[0] if current else None)
        try:
            model = body.get('model') or self.engine.served_names[0]
            with self.engine.sched.generation(reply, prompt_tokens, arrived) as gen:
                current.append(gen)
                if body.get('stream'):
                    include_usage = bool((body.get('stream_options') or {}).get('include_usage'))
                    self._stream(chat, model, prompt_tokens, n_tokens, finish_reason, include_usage, gen, body, finish)
                else:
                    tokens = [t for step in self.engine.steps(n_tokens, gen) for t in step]
                    response = self._response(chat, model, tokens, prompt_tokens, n_tokens, finish_reason, gen, body)
                    finish()
                    self._json(200, response)
        finally:
            finish()

    def _tokenize(self, path: str) -> None:
        """POST /tokenize and /detokenize (vllm/entrypoints/serve/tokenize: TokenizeResponse count, max_model_len,
        tokens, token_strs; DetokenizeResponse prompt), outside /v1 like the real routes."""
        try:
            body = self._body()
            if path == '/detokenize':
                tokens = body.get('tokens')
                if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                    raise ApiError(400, 'tokens must be a list of integers.', param='tokens')
                self._json(200, {'prompt': ' '.join('t%d' % t for t in tokens)})
                return
            count = _chat_prompt_tokens(body) if 'messages' in body else _completion_prompt_tokens(body)
        except ApiError as exc:
            self._json(exc.status, exc.body())
            return
        self._json(200, {'count': count, 'max_model_len': self.engine.max_model_len,
                         'tokens': [1000 + i for i in range(count)], 'token_strs': None})

    # ------------------------------------------------------------------ bodies
    @staticmethod
    def _usage(prompt_tokens: int, completion_tokens: int) -> Dict[str, Any]:
        return {'prompt_tokens': prompt_tokens, 'total_tokens': prompt_tokens + completion_tokens,
                'completion_tokens': completion_tokens, 'prompt_tokens_details': None}

    def _response(self, chat: bool, model: str, tokens: List[str], prompt_tokens: int, n_tokens: int, finish_reason: str,
                  gen: behaviour.Generation, body: Dict[str, Any]) -> Dict[str, Any]:
        created = int(time.time())
        text = ''.join(tokens)
        top = behaviour.want_logprobs(body, chat)
        rows = behaviour.logprob_rows(tokens, gen.soft, created, gen.runner_up) if top is not None else []
        if chat:
            content: Optional[str] = text
            tool_calls: List[Dict[str, Any]] = []
            if gen.reply.tool:
                content = None      # a cut-off call reports "length" and drops its unparseable arguments (issue55)
                if finish_reason == 'tool_calls':
                    tool_calls = [{'id': 'chatcmpl-tool-%s' % uuid.uuid4().hex, 'type': 'function',
                                   'function': {'name': gen.reply.tool['name'], 'arguments': text}}]
            message = {'role': 'assistant', 'content': content, 'reasoning_content': gen.reply.reasoning,
                       'tool_calls': tool_calls}
            if gen.reply.reasoning:
                message['reasoning'] = gen.reply.reasoning
            return {'id': 'chatcmpl-%s' % uuid.uuid4().hex, 'object': 'chat.completion', 'created': created, 'model': model,
                    'choices': [{'index': 0, 'message': message,
                                 'logprobs': behaviour.chat_logprobs(rows, top) if top is not None else None,
                                 'finish_reason': finish_reason, 'stop_reason': None}],
                    'usage': self._usage(prompt_tokens, n_tokens), 'prompt_logprobs': None}
        return {'id': 'cmpl-%s' % uuid.uuid4().hex, 'object': 'text_completion', 'created': created, 'model': model,
                'choices': [{'index': 0, 'text': text,
                             'logprobs': behaviour.completion_logprobs(rows, top) if top is not None else None,
                             'finish_reason': finish_reason, 'stop_reason': None, 'prompt_logprobs': None}],
                'usage': self._usage(prompt_tokens, n_tokens)}

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b'%X\r\n%s\r\n' % (len(data), data))
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(('data: %s\n\n' % text).encode())

    def _stream(self, chat: bool, model: str, prompt_tokens: int, n_tokens: int, finish_reason: str, include_usage: bool,
                gen: behaviour.Generation, body: Dict[str, Any], done: Optional[Callable[[], None]] = None) -> None:
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream; charset=utf-8')
        self.send_header('Cache-Control', 'no-cache')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        rid = ('chatcmpl-' if chat else 'cmpl-') + uuid.uuid4().hex
        created = int(time.time())
        kind = 'chat.completion.chunk' if chat else 'text_completion'

        def frame(choice: Optional[Dict[str, Any]], usage: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
            out = {'id': rid, 'object': kind, 'created': created, 'model': model, 'choices': [choice] if choice else []}
            if include_usage:
                out['usage'] = usage
            return out

        try:
            if chat:
                self._event(frame({'index': 0, 'delta': {'role': 'assistant', 'content': ''}, 'logprobs': None,
                                   'finish_reason': None}))
            top = behaviour.want_logprobs(body, chat)
            if chat and gen.reply.reasoning:
                self._event(frame({'index': 0, 'delta': {'reasoning_content': gen.reply.reasoning,
                                                         'reasoning': gen.reply.reasoning},
                                   'logprobs': None, 'finish_reason': None}))
            for index, step in enumerate(self.engine.steps(n_tokens, gen)):
                text = ''.join(step)
                rows = behaviour.logprob_rows(step, gen.soft, created, gen.runner_up if index == 0 else None) if top is not None else []
                if chat:
                    lps = behaviour.chat_logprobs(rows, top) if top is not None else None
                    if gen.reply.tool:
                        delta: Dict[str, Any] = {'tool_calls': [{'index': 0, 'function': {'arguments': text}}]}
                    else:
                        delta = {'content': text}
                    self._event(frame({'index': 0, 'delta': delta, 'logprobs': lps, 'finish_reason': None}))
                else:
                    lps = behaviour.completion_logprobs(rows, top) if top is not None else None
                    self._event(frame({'index': 0, 'text': text, 'logprobs': lps, 'finish_reason': None, 'stop_reason': None}))
            if done is not None:
                done()      # counted before the last frames reach the client
            if chat:
                self._event(frame({'index': 0, 'delta': {}, 'logprobs': None, 'finish_reason': finish_reason, 'stop_reason': None}))
            else:
                self._event(frame({'index': 0, 'text': '', 'logprobs': None, 'finish_reason': finish_reason, 'stop_reason': None}))
            if include_usage:
                self._event(frame(None, self._usage(prompt_tokens, n_tokens)))
            self._event('[DONE]')
            self._chunk(b'')
        except (BrokenPipeError, ConnectionResetError):
            return
        self._access(200)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class ApiServer:
    """The HTTP server in a thread."""

    def __init__(self, host: str, port: int, engine: Engine, api_keys: List[str]):
        handler = type('BoundHandler', (Handler,), {'engine': engine, 'api_keys': [k for k in api_keys if k]})
        self.httpd = (_Server6 if ':' in host else _Server)((host, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.2}, name='api-server',
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
