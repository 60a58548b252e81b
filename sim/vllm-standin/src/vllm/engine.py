"""What the stand-in's engine answers, how fast, and its fault modes (the guards' counterpart).

A healthy engine answers the collection's validation and benchmark requests the
way a healthy DeepSeek-V4-Flash on vLLM does. The contract (prompts are plain text;
"the prompt" is every message's content, "the question" the last user message):

- Block read-back (guard 4): lines ``BLOCK <n> MARKER: <code>`` anywhere in the
  prompt and a question matching ``list ... marker`` -> one line ``<n>: <code>`` per
  block, in prompt order.
- Needles (needle ladder): sentences ``The pass code for <name> is <value>.`` and a
  question matching ``pass code`` -> one line ``<name>: <value>`` per needle.
- Tools: a request with ``tools`` (and ``tool_choice`` not ``none``) calls the first
  tool; cut off by max_tokens it reports finish_reason "length" and no tool_calls
  (the issue55 fix), else "tool_calls" with JSON arguments.
- Thinking: ``chat_template_kwargs.thinking`` (or ``enable_thinking``) true -> a
  ``reasoning_content`` (and ``reasoning``) field beside the content.
- Anything else: the scripted sentence; ``ignore_eos: true`` with max_tokens generates
  max_tokens tokens (the sentence over and over), as benchmarks ask for.
- Logprobs (``logprobs`` + ``top_logprobs`` on chat, ``logprobs: N`` on completions):
  healthy tokens are sharp (chosen -0.0001..-0.0003, the runner-up near -9.8).
- Speculative decoding: DSpark steps of k drafted tokens accept a fraction that
  depends on the prompt: 0.875 for code (a question mentioning code, function,
  python, a ``def`` or a ``` fence), 0.55 for anything else (seed 004 measured
  0.847 and 0.526). The /metrics spec-decode counters move accordingly.
- Rates: the first token after ``prompt_tokens / prefill_tok_s`` seconds, then
  ``decode_tok_s`` tokens per second for each request (independent of the others;
  0 = as fast as possible).

Configuration, re-read when the file changes: the node's sim state file
(``SPARK_SIM_STATE``, default /var/lib/spark-sim/state.json), key ``vllm_standin``::

    {"prefill_tok_s": 20000, "decode_tok_s": 60, "soft_logits_after_s": 0,
     "faults": ["kv-block-corruption", ...]}

falling back to ``VLLM_STANDIN_PREFILL_TOK_S`` / ``VLLM_STANDIN_DECODE_TOK_S``
(environment). ``sim/spark-sim -i INV fault HOST NAME`` sets the faults:

- ``kv-block-corruption`` (seed 000 finding #12): when three or more requests
  prefill together, every second block marker of each of them reads back as a
  plausible wrong code; two or fewer stay clean.
- ``soft-logits-alone`` (finding #13): a request running alone, once the engine has
  been up ``soft_logits_after_s`` seconds, gets soft, drifting logprobs (top about
  -0.74, runner-up about -1.49) and a different first token; beside a neighbour it
  stays sharp.
- ``low-acceptance`` (finding #9): drafts accept 0.08 of their tokens.
- ``slow-decode``: decode runs at a quarter of its rate.
- ``slow-prefill``: prefill runs at 940 tokens/s (seed 000: a 468,540-token needle took
  498 s), chunk by chunk (``--max-num-batched-tokens``): the KV usage grows at every
  chunk, the prompt and generation counters stay where they are until the prefill ends
  (vLLM counts a prompt with its first token), as a long prefill on a real pair.
- ``wedge``: the engine hangs while serving (seed 000: a worker pinned for 30+ minutes
  while the API kept answering): requests are admitted and count as running, none
  advances (no prefill ends, no token), the counters and the KV usage freeze, /health
  stays 200, until the process ends. It hits the engine that runs when it is set: a
  process that starts with it already set serves (a restart clears a wedge); clear it
  and set it again to wedge that process too.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

TOKEN_RE = re.compile(r'\s*\w+|\s*[^\w\s]')
MARKER_RE = re.compile(r'BLOCK\s+(\d+)\s+MARKER:\s*([A-Za-z0-9-]+)')
NEEDLE_RE = re.compile(r'The pass code for ([A-Za-z0-9-]+) is ([A-Za-z0-9-]+)\.')
ASK_MARKERS_RE = re.compile(r'\blist\b.*\bmarkers?\b', re.I | re.S)
ASK_NEEDLES_RE = re.compile(r'\bpass codes?\b', re.I)
CODE_RE = re.compile(r'```|\bdef\b|\b(code|function|python|program)\b', re.I)
FAULTS = ('kv-block-corruption', 'soft-logits-alone', 'low-acceptance', 'slow-decode', 'slow-prefill', 'wedge')
ACCEPT_CODE = 0.875
ACCEPT_PROSE = 0.55
ACCEPT_LOW = 0.08
SLOW_DECODE_FACTOR = 0.25
SLOW_PREFILL_TOK_S = 468540 / 498.0   # seed 000: the 468,540-token needle search took 498 s
CHUNK_TOKENS = 8192                    # --max-num-batched-tokens default of the recipe and the collection
CORRUPT_AT = 3          # concurrent prefills at which the block zeroer bites (seed 000 #12)
SOFT_LOGPROBS = (-0.74, -1.49)
DEFAULT_STATE = '/var/lib/spark-sim/state.json'


def tokens_of(text: str) -> List[str]:
    return TOKEN_RE.findall(text or '')


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return ' '.join(part.get('text', '') for part in content if isinstance(part, dict))
    return ''


def prompt_parts(body: Dict[str, Any], chat: bool) -> Tuple[str, str]:
    """(the whole prompt, the question) of a request body."""
    if chat:
        messages = [m for m in body.get('messages') or [] if isinstance(m, dict)]
        whole = '\n'.join(_text(m.get('content')) for m in messages)
        users = [_text(m.get('content')) for m in messages if m.get('role') == 'user']
        return whole, (users[-1] if users else '')
    prompt = body.get('prompt')
    if isinstance(prompt, list):
        prompt = ' '.join(p for p in prompt if isinstance(p, str))
    prompt = prompt if isinstance(prompt, str) else ''
    return prompt, prompt


def _float(value: Any, default: float) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out if out >= 0 else default


class Conditions:
    """Rates and faults: the state file's ``vllm_standin`` (re-read when it changes), else the environment."""

    def __init__(self, environ: Optional[Dict[str, str]] = None, path: Optional[str] = None):
        self.environ = os.environ if environ is None else environ
        self.path = path or self.environ.get('SPARK_SIM_STATE', DEFAULT_STATE)
        self._stamp: Optional[Tuple[float, int]] = None
        self._section: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def section(self) -> Dict[str, Any]:
        with self._lock:
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime, st.st_size)
            except OSError:
                self._stamp, self._section = None, {}
                return {}
            if stamp != self._stamp:
                try:
                    with open(self.path, encoding='utf-8') as handle:
                        data = json.load(handle)
                    section = data.get('vllm_standin') if isinstance(data, dict) else None
                    self._section = section if isinstance(section, dict) else {}
                except (OSError, ValueError):
                    self._section = {}
                self._stamp = stamp
            return self._section

    def faults(self) -> List[str]:
        faults = self.section().get('faults') or []
        return [f for f in faults if f in FAULTS] if isinstance(faults, list) else []

    def prefill_rate(self) -> float:
        section = self.section()
        rate = _float(section.get('prefill_tok_s', self.environ.get('VLLM_STANDIN_PREFILL_TOK_S')), 0.0)
        if 'slow-prefill' in self.faults():
            rate = min(rate, SLOW_PREFILL_TOK_S) if rate else SLOW_PREFILL_TOK_S
        return rate

    def decode_rate(self) -> float:
        section = self.section()
        rate = _float(section.get('decode_tok_s', self.environ.get('VLLM_STANDIN_DECODE_TOK_S')), 0.0)
        if rate and 'slow-decode' in self.faults():
            rate *= SLOW_DECODE_FACTOR
        return rate

    def soft_after(self) -> float:
        return _float(self.section().get('soft_logits_after_s'), 0.0)


class Reply:
    """What a request will answer, before the engine's state (concurrency, faults) shapes it."""

    def __init__(self, kind: str, items: List[Tuple[str, str]], tool: Optional[Dict[str, Any]], reasoning: Optional[str],
                 acceptance: float, natural: List[str]):
        self.kind = kind            # markers | needles | tool | text
        self.items = items          # (label, code) of markers or needles
        self.tool = tool            # {'name', 'arguments'} of a tool call
        self.reasoning = reasoning
        self.acceptance = acceptance
        self.natural = natural      # the scripted sentence's tokens

    def render(self, corrupt: bool) -> List[str]:
        if self.kind in ('markers', 'needles'):
            lines = []
            for i, (label, code) in enumerate(self.items):
                if corrupt and i % 2 == 1:
                    code = fabricate(code)
                lines.append('%s: %s' % (label, code))
            return tokens_of('\n'.join(lines))
        if self.kind == 'tool':
            return tokens_of(self.tool['arguments'])
        return list(self.natural)


def fabricate(code: str) -> str:
    """A plausible wrong code of the same shape (what a zeroed KV block reads back as)."""
    alphabet = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789'
    out = []
    for ch in code:
        if ch.isalnum():
            idx = alphabet.find(ch.upper())
            out.append(alphabet[(idx + 7) % len(alphabet)] if idx >= 0 else 'Q')
        else:
            out.append(ch)
    return ''.join(out)


def plan(body: Dict[str, Any], chat: bool, natural: List[str], faults: List[str]) -> Reply:
    """The reply a request gets (the contract in the module docstring)."""
    whole, question = prompt_parts(body, chat)
    acceptance = ACCEPT_LOW if 'low-acceptance' in faults else (ACCEPT_CODE if CODE_RE.search(question) else ACCEPT_PROSE)
    kwargs = body.get('chat_template_kwargs') if isinstance(body.get('chat_template_kwargs'), dict) else {}
    thinking = chat and bool(kwargs.get('thinking') or kwargs.get('enable_thinking'))
    reasoning = 'The request is scripted; the stand-in thinks in one sentence.' if thinking else None
    tools = body.get('tools')
    if chat and isinstance(tools, list) and tools and body.get('tool_choice') != 'none':
        first = tools[0] if isinstance(tools[0], dict) else {}
        name = (first.get('function') or {}).get('name') or 'tool'
        words = [w.strip() for w in tokens_of(question) if w.strip().isalnum()][:24] or ['spark']
        arguments = json.dumps({'query': ' '.join(words), 'limit': 10})
        return Reply('tool', [], {'name': name, 'arguments': arguments}, reasoning, acceptance, natural)
    if ASK_MARKERS_RE.search(question):
        markers = MARKER_RE.findall(whole)
        if markers:
            return Reply('markers', markers, None, reasoning, acceptance, natural)
    if ASK_NEEDLES_RE.search(question):
        needles = NEEDLE_RE.findall(whole)
        if needles:
            return Reply('needles', needles, None, reasoning, acceptance, natural)
    return Reply('text', [], None, reasoning, acceptance, natural)


def _token_bytes(token: str) -> List[int]:
    return list(token.encode('utf-8'))


ALTERNATIVES = (' A', ' It', ' This', ' In', ' For')


def logprob_rows(tokens: List[str], soft: bool, seed: int, runner_up: Optional[str] = None) -> List[Dict[str, Any]]:
    """vLLM's chat logprobs ``content`` rows (token, logprob, bytes, top_logprobs) for the generated tokens.

    Soft rows drift with ``seed``; ``runner_up`` is the first row's second candidate (the
    token a healthy engine would have chosen)."""
    rng = random.Random(seed)
    rows = []
    for i, token in enumerate(tokens):
        if soft:
            lp1 = SOFT_LOGPROBS[0] + rng.uniform(-0.08, 0.08)
            lp2 = SOFT_LOGPROBS[1] + rng.uniform(-0.08, 0.08)
            second = runner_up if (i == 0 and runner_up) else ALTERNATIVES[(i + 1) % len(ALTERNATIVES)]
            cands = [(token, round(lp1, 4)), (second, round(lp2, 4))]
        else:
            cands = [(token, -0.0001 * (1 + i % 3)), (ALTERNATIVES[i % len(ALTERNATIVES)], -9.8 - 0.1 * (i % 4))]
        cands += [(ALTERNATIVES[(i + j) % len(ALTERNATIVES)] + str(j), -12.0 - j) for j in range(2, 20)]
        rows.append({'token': token, 'logprob': cands[0][1], 'bytes': _token_bytes(token),
                     'top_logprobs': [{'token': t, 'logprob': lp, 'bytes': _token_bytes(t)} for t, lp in cands]})
    return rows


def want_logprobs(body: Dict[str, Any], chat: bool) -> Optional[int]:
    """The number of top logprobs a request asks for, None when it asks for none."""
    if chat:
        if not body.get('logprobs'):
            return None
        top = body.get('top_logprobs')
        return int(top) if isinstance(top, int) and not isinstance(top, bool) and top >= 0 else 0
    value = body.get('logprobs')
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def chat_logprobs(rows: List[Dict[str, Any]], top: int) -> Dict[str, Any]:
    return {'content': [dict(row, top_logprobs=row['top_logprobs'][:top]) for row in rows]}


def completion_logprobs(rows: List[Dict[str, Any]], top: int) -> Dict[str, Any]:
    offsets, pos = [], 0
    for row in rows:
        offsets.append(pos)
        pos += len(row['token'])
    return {'tokens': [r['token'] for r in rows], 'token_logprobs': [r['logprob'] for r in rows],
            'top_logprobs': [{c['token']: c['logprob'] for c in r['top_logprobs'][:top]} for r in rows],
            'text_offset': offsets}


class Scheduler:
    """Who is prefilling and running now (what the faults depend on)."""

    def __init__(self, conditions: Optional[Conditions] = None, chunk_tokens: int = CHUNK_TOKENS):
        self.conditions = conditions or Conditions()
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.running = 0
        self.prefilling: List['Generation'] = []
        self.active: List['Generation'] = []
        self.chunk_tokens = max(1, int(chunk_tokens or CHUNK_TOKENS))
        self._unfelt = set(self.conditions.faults()) & {'wedge'}   # set before this engine started: not felt

    def wedged(self) -> bool:
        """The ``wedge`` fault, set while this engine runs (one set before it started is not felt until cleared)."""
        faults = set(self.conditions.faults())
        with self.lock:
            self._unfelt &= faults
            return 'wedge' in faults and 'wedge' not in self._unfelt

    def held_tokens(self, now: Optional[float] = None) -> int:
        """KV-cache tokens the running requests hold now: the chunks prefilled so far, then prompt and output."""
        now = time.monotonic() if now is None else now
        with self.lock:
            return sum(gen.held(now) for gen in self.active)

    def generation(self, reply: Reply, prompt_tokens: int, arrived: Optional[float] = None) -> 'Generation':
        return Generation(self, reply, prompt_tokens, arrived)


class Generation:
    """One request through prefill and decode."""

    def __init__(self, sched: Scheduler, reply: Reply, prompt_tokens: int, arrived: Optional[float] = None):
        self.sched = sched
        self.reply = reply
        self.prompt_tokens = prompt_tokens
        self.peak = 0
        self.tokens: List[str] = []
        self.soft = False
        self.corrupt = False
        self.faults = sched.conditions.faults()
        self.runner_up = None
        self.t_first = 0.0
        self.rate = 0.0
        self.created = time.monotonic() if arrived is None else arrived
        self.prefill_seconds = 0.0
        self.prefill_end: Optional[float] = None     # when the prefill ended (None: still prefilling)
        self.generated = 0                           # output tokens the engine counted so far
        self.prompt_counted = False                  # the prompt counted (with the first token, as vLLM does)

    def held(self, now: float) -> int:
        """KV tokens this request holds at ``now``: whole chunks of its prompt while it prefills, then all of it."""
        if self.prefill_end is not None:
            return self.prompt_tokens + self.generated
        if self.prefill_seconds <= 0:
            return 0
        done = self.prompt_tokens * min(1.0, max(0.0, now - self.created) / self.prefill_seconds)
        chunk = self.sched.chunk_tokens
        return min(self.prompt_tokens, int(done // chunk) * chunk)

    def __enter__(self) -> 'Generation':
        with self.sched.lock:
            self.sched.running += 1
            self.sched.active.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.sched.lock:
            self.sched.running -= 1
            if self in self.sched.active:
                self.sched.active.remove(self)

    def prefill(self, stop: Optional[threading.Event] = None) -> List[str]:
        """Wait out the prefill; returns the reply's tokens as this engine state renders them."""
        rate = self.sched.conditions.prefill_rate()
        seconds = self.prompt_tokens / rate if rate else 0.0
        if 'kv-block-corruption' in self.faults and self.reply.kind in ('markers', 'needles'):
            seconds = max(seconds, 1.0)     # a window in which co-scheduled prefills overlap
        self.prefill_seconds = seconds
        with self.sched.lock:
            self.sched.prefilling.append(self)
            for gen in self.sched.prefilling:
                gen.peak = max(gen.peak, len(self.sched.prefilling))
        try:
            remaining = self.created + seconds - time.monotonic()     # counted from the request's arrival
            if remaining > 0:
                (stop.wait if stop else time.sleep)(remaining)
        finally:
            with self.sched.lock:
                self.sched.prefilling.remove(self)
                alone = self.sched.running == 1
        self.corrupt = 'kv-block-corruption' in self.faults and self.peak >= CORRUPT_AT
        warm = time.monotonic() - self.sched.started >= self.sched.conditions.soft_after()
        self.soft = 'soft-logits-alone' in self.faults and alone and warm
        self.tokens = self.reply.render(self.corrupt)
        self.prefill_end = time.monotonic()
        self.runner_up: Optional[str] = None
        if self.soft and self.tokens and self.reply.kind == 'text':
            self.runner_up = self.tokens[0]     # the stale graph picks another argmax
            self.tokens[0] = ALTERNATIVES[0] if self.tokens[0] != ALTERNATIVES[0] else ALTERNATIVES[1]
        return self.tokens

    def first_token_sent(self) -> None:
        self.t_first = time.monotonic()
        self.rate = self.sched.conditions.decode_rate()

    def pace(self, after_first: int) -> None:
        """Sleep until ``after_first`` tokens after the first are due (an absolute schedule: no drift)."""
        if not self.rate:
            return
        delay = self.t_first + after_first / self.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def accepted_counts(fraction: float, k: int) -> Iterator[int]:
    """Accepted draft tokens per step: an exact running mean of fraction * k (Bresenham)."""
    step = 0
    while True:
        yield int((step + 1) * fraction * k + 1e-9) - int(step * fraction * k + 1e-9)
        step += 1


