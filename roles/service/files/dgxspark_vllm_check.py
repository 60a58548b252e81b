# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that a vLLM head serves: /v1/models, then a 1-token completion.

    dgxspark_vllm_check.py --url http://127.0.0.1:8888 --served-model-name NAME
                           [--max-model-len 1048576] [--secret-env-file /etc/dgxspark/vllm-secret.env]
                           [--models-only] [--timeout 10] [--completion-timeout 300]

/health can say OK after a lost tensor-parallel peer; the end-to-end proof is a
completion. The API key is read from the secret environment file
(``VLLM_API_KEY=...``), never taken from argv. Prints one line saying what was
found. Exit 0: serving; 1: not (yet) serving; 2: usage error.
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
    parser.add_argument('--completion-timeout', type=float, default=300.0, help='seconds for the 1-token completion')
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
    body = {'model': args.served_model_name, 'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}
    try:
        problem = completion_problem(_request(base + '/v1/completions', key, args.completion_timeout, body))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        problem = '%s/v1/completions (1 token): %s' % (base, exc)
    if problem:
        print('not serving: %s' % problem)
        return 1
    print('serving: /v1/models lists %s (max_model_len %s) and a 1-token completion answered'
          % (args.served_model_name, args.max_model_len))
    return 0


if __name__ == '__main__':
    sys.exit(main())
