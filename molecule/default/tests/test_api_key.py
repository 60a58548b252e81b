"""The head's API with the quick-start key (issue 13): /v1 answers 401 without the key and 200 with it,
and the routes vLLM leaves outside its key check (/health) answer without it, as the README says."""

import base64
import json

PROBE = r"""
import json, sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = {}
key = ''
for line in open('/etc/dgxspark/vllm-secret.env'):
    name, sep, value = line.strip().partition('=')
    if sep and name == 'VLLM_API_KEY':
        key = value.strip().strip('"')
for label, path, auth in (('models-no-key', '/v1/models', None), ('models-wrong-key', '/v1/models', 'Bearer wrong'),
                          ('models-key', '/v1/models', 'Bearer ' + key), ('health-no-key', '/health', None)):
    req = urllib.request.Request('http://127.0.0.1:8888' + path, headers={'Authorization': auth} if auth else {})
    try:
        with opener.open(req, timeout=10) as resp:
            out[label] = resp.status
    except urllib.error.HTTPError as err:
        out[label] = err.code
out['key-set'] = bool(key)
print(json.dumps(out))
"""


def test_the_api_answers_401_without_the_key(host):
    if "spark-head" not in host.backend.get_hostname():
        assert not host.socket("tcp://0.0.0.0:8888").is_listening
        return
    proc = host.run("echo %s | base64 -d | python3 -" % base64.b64encode(PROBE.encode()).decode())
    assert proc.rc == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == {"models-no-key": 401, "models-wrong-key": 401, "models-key": 200, "health-no-key": 200,
                   "key-set": True}, got
