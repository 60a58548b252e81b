# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small client for the head's OpenAI-compatible API on loopback (stdlib only).

Used by the vllm_validate and vllm_benchmark modules. The API key comes from the
secret environment file (``VLLM_API_KEY=...``), never from argv; it only travels in
the Authorization header and never appears in a message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading
import time

try:
    from http.client import HTTPConnection, HTTPException
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 is not supported on the nodes
    HTTPConnection = HTTPException = urlsplit = None


class ApiError(Exception):
    pass


def read_api_key(path):
    """VLLM_API_KEY from an EnvironmentFile-style file; "" when the file or the key is absent."""
    if not path:
        return ''
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return ''
    for line in lines:
        key, sep, value = line.strip().partition('=')
        if sep and key.strip() == 'VLLM_API_KEY':
            return value.strip().strip('"').strip("'")
    return ''


class Client:
    def __init__(self, base_url, api_key='', timeout=600.0):
        self.base_url = base_url.rstrip('/')
        self.api_key = api_key
        self.timeout = timeout

    def _open(self, path, body=None):
        """The response of a GET (or a POST of ``body``), status checked; plain HTTP on loopback, no proxy."""
        method = 'POST' if body is not None else 'GET'
        url = urlsplit(self.base_url + path)
        headers = {'Content-Type': 'application/json'}
        if self.api_key:
            headers['Authorization'] = 'Bearer ' + self.api_key
        data = json.dumps(body).encode() if body is not None else None
        target = url.path + ('?' + url.query if url.query else '')
        try:
            conn = HTTPConnection(url.hostname, url.port or 80, timeout=self.timeout)
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
        except (HTTPException, OSError) as exc:
            raise ApiError('%s %s failed: %s' % (method, path, exc))
        if resp.status >= 400:
            detail = resp.read()[:300].decode('utf-8', 'replace')
            conn.close()
            raise ApiError('%s %s answered HTTP %d: %s' % (method, path, resp.status, detail))
        return resp

    def get_json(self, path):
        with self._open(path) as resp:
            return json.loads(resp.read().decode())

    def get_text(self, path):
        with self._open(path) as resp:
            return resp.read().decode()

    def post(self, path, body):
        with self._open(path, body) as resp:
            return json.loads(resp.read().decode())

    def chat(self, body):
        return self.post('/v1/chat/completions', body)

    def timed_chat(self, body):
        start = time.monotonic()
        out = self.chat(body)
        return out, time.monotonic() - start

    def stream(self, body, on_first=None):
        """A streaming chat with usage; returns {'ttft', 't_first', 't_last', 'elapsed', 'usage', 'text', 'finish_reason'}.

        Times are seconds from sending; t_first/t_last are the arrival of the first and the
        last frame that carried generated text.
        """
        body = dict(body, stream=True, stream_options={'include_usage': True})
        start = time.monotonic()
        t_first = t_last = None
        usage, finish, parts = None, None, []
        with self._open('/v1/chat/completions', body) as resp:
            for raw in resp:
                line = raw.decode('utf-8', 'replace').strip()
                if not line.startswith('data:'):
                    continue
                data = line[5:].strip()
                if data == '[DONE]':
                    break
                try:
                    frame = json.loads(data)
                except ValueError:
                    continue
                now = time.monotonic() - start
                if frame.get('usage'):
                    usage = frame['usage']
                for choice in frame.get('choices') or []:
                    delta = choice.get('delta') or {}
                    text = delta.get('content') or delta.get('reasoning_content') or delta.get('reasoning') or ''
                    if not text and delta.get('tool_calls'):
                        text = ''.join(((c or {}).get('function') or {}).get('arguments') or '' for c in delta['tool_calls'])
                    if text:
                        if t_first is None:
                            t_first = now
                            if on_first:
                                on_first()
                        t_last = now
                        parts.append(text)
                    if choice.get('finish_reason'):
                        finish = choice['finish_reason']
        return {'ttft': t_first, 't_first': t_first, 't_last': t_last, 'elapsed': time.monotonic() - start, 'usage': usage,
                'text': ''.join(parts), 'finish_reason': finish}


def together(calls):
    """Run the callables at once (threads started behind a barrier); returns their results (an exception as a value)."""
    results = [None] * len(calls)
    barrier = threading.Barrier(len(calls)) if len(calls) > 1 else None

    def run(i, call):
        try:
            if barrier:
                barrier.wait(timeout=30)
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - reported as the call's result
            results[i] = exc
    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
