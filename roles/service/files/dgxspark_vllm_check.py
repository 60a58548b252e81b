# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that a vLLM head serves: /v1/models, then a 1-token completion and a 1-token chat completion.

    dgxspark_vllm_check.py --url http://127.0.0.1:8888 --served-model-name NAME
                           [--max-model-len 1048576] [--secret-env-file /etc/dgxspark/vllm-secret.env]
                           [--models-only] [--timeout 10] [--completion-timeout 300]

/health keeps saying OK after the head lost a tensor-parallel worker: vLLM's head
does not watch another node's processes, its requests wait until the engine core's
execute-model timeout (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 1800 s in the recipe).
The end-to-end proof is a completion, and a chat completion (the chat template
path can fail alone). Each waits at most --completion-timeout seconds. The API key
is read from the secret environment file (``VLLM_API_KEY=...``), never taken from
argv. Prints one line saying what was found. Exit 0: serving; 1: not (yet)
serving; 2: usage error; 3: the engine hangs (/health answers 200, a 1-token
request got no answer in time).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request


def read_api_key(path):
    """VLLM_API_KEY from an EnvironmentFile-style file (``KEY=value`` lines); "" when absent.

    >>> import tempfile, os
    >>> f = tempfile.NamedTemporaryFile('w', delete=False); _ = f.write('# c\\nVLLM_API_KEY="k1"\\n'); f.close()
    >>> read_api_key(f.name)
    'k1'
    """
    if not path:
        return ''
    try:
        with open(path, encoding='utf-8') as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return ''
    for line in lines:
        key, sep, value = line.strip().partition('=')
        if sep and key.strip() == 'VLLM_API_KEY':
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
                value = value[1:-1]
            return value
    return ''


def models_problem(payload, served, max_model_len=None):
    """None when the /v1/models payload lists ``served`` (with ``max_model_len`` when given), else what is wrong.

    >>> models_problem({'data': [{'id': 'm', 'max_model_len': 8}]}, 'm', 8) is None
    True
    >>> models_problem({'data': [{'id': 'm', 'max_model_len': 4}]}, 'm', 8)
    'm has max_model_len 4, expected 8'
    """
    data = payload.get('data') if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return '/v1/models answered %r, expected {"data": [...]}' % (payload,)
    entries = [m for m in data if isinstance(m, dict) and m.get('id') == served]
    if not entries:
        return '/v1/models lists %s, expected %s' % (', '.join(str(m.get('id')) for m in data if isinstance(m, dict)) or 'nothing', served)
    found = entries[0].get('max_model_len')
    if max_model_len is not None and found != max_model_len:
        return '%s has max_model_len %s, expected %s' % (served, found, max_model_len)
    return None


def completion_problem(payload):
    """None when a completion payload carries at least one choice, else what is wrong.

    >>> completion_problem({'choices': [{'text': 'x'}]}) is None
    True
    """
    choices = payload.get('choices') if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices:
        return 'the completion answered %r, expected at least one choice' % (payload,)
    return None


def chat_problem(payload):
    """None when a chat completion payload carries a choice with a message, else what is wrong.

    >>> chat_problem({'choices': [{'message': {'role': 'assistant', 'content': 'x'}}]}) is None
    True
    >>> chat_problem({'choices': [{'text': 'x'}]})
    "the chat completion answered {'choices': [{'text': 'x'}]}, expected a choice with a message"
    """
    choices = payload.get('choices') if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get('message'), dict):
        return 'the chat completion answered %r, expected a choice with a message' % (payload,)
    return None


def timed_out(exc):
    """True when a request error is a read or connect timeout (the server took the request and never answered).

    >>> import socket, urllib.error
    >>> timed_out(socket.timeout('timed out')), timed_out(urllib.error.URLError(socket.timeout('x')))
    (True, True)
    >>> timed_out(urllib.error.URLError(ConnectionRefusedError(111, 'refused')))
    False
    """
    reason = getattr(exc, 'reason', exc)
    return isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError) or 'timed out' in str(reason)


def health_status(base, timeout):
    """The HTTP status /health answers (vLLM: 200, 503 once the engine core died), or the error as text."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(base + '/health'), timeout=timeout) as resp:  # nosec - the head's own API
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, 'reason', exc))


def _request(url, key, timeout, body=None):
    headers = {'Accept': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer ' + key
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers['Content-Type'] = 'application/json'
    req = urllib.request.Request(url, data=data, headers=headers, method='POST' if body is not None else 'GET')
    # No proxy, whatever the node's environment says: a proxy would receive the bearer key.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as resp:  # nosec - the head's own API
        return json.loads(resp.read().decode() or 'null')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--url', required=True, help='base URL of the API, e.g. http://127.0.0.1:8888')
    parser.add_argument('--served-model-name', required=True)
    parser.add_argument('--max-model-len', type=int, default=None)
    parser.add_argument('--secret-env-file', default='')
    parser.add_argument('--models-only', action='store_true', help='check /v1/models only, no completion')
    parser.add_argument('--timeout', type=float, default=10.0, help='seconds for /v1/models')
    parser.add_argument('--completion-timeout', type=float, default=300.0, help='seconds for each 1-token request (completion, chat completion)')
    args = parser.parse_args(argv)
    base = args.url.rstrip('/')
    key = read_api_key(args.secret_env_file)
    try:
        problem = models_problem(_request(base + '/v1/models', key, args.timeout), args.served_model_name, args.max_model_len)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        problem = '%s/v1/models: %s' % (base, exc)
    if problem:
        print('not serving: %s' % problem)
        return 1
    if args.models_only:
        print('serving: /v1/models lists %s (max_model_len %s)' % (args.served_model_name, args.max_model_len))
        return 0
    probes = (('completion', '/v1/completions', completion_problem,
               {'model': args.served_model_name, 'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}),
              ('chat completion', '/v1/chat/completions', chat_problem,
               {'model': args.served_model_name, 'messages': [{'role': 'user', 'content': 'ping'}],
                'max_tokens': 1, 'temperature': 0}))
    for what, path, check, body in probes:
        try:
            problem = check(_request(base + path, key, args.completion_timeout, body))
        except urllib.error.HTTPError as exc:
            problem = '%s%s (1 token): HTTP %s %s' % (base, path, exc.code, _error_text(exc))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if timed_out(exc):
                status = health_status(base, args.timeout)
                if status == 200:
                    print('engine hangs: /health answers 200 and /v1/models lists %s, but the 1-token %s (%s) got no '
                          'answer within %s s: the engine waits on a rank that is gone (vLLM gives up only at '
                          'VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS)' % (args.served_model_name, what, path, _seconds(args.completion_timeout)))
                    return 3
                problem = '%s%s (1 token): no answer within %s s; /health: %s' % (base, path, _seconds(args.completion_timeout), status)
            else:
                problem = '%s%s (1 token): %s' % (base, path, exc)
        if problem:
            print('not serving: %s' % problem)
            return 1
    print('serving: /v1/models lists %s (max_model_len %s), a 1-token completion and a 1-token chat completion answered'
          % (args.served_model_name, args.max_model_len))
    return 0


def _seconds(value):
    return ('%g' % value) if isinstance(value, float) else str(value)


def _error_text(exc):
    """The message of an OpenAI-style error body (vLLM's {"error": {"message": ...}}), else the reason."""
    try:
        body = json.loads(exc.read().decode() or 'null')
    except (OSError, ValueError):
        body = None
    error = body.get('error') if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get('message'):
        return str(error['message'])[:300]
    return str(exc.reason)


if __name__ == '__main__':
    sys.exit(main())
