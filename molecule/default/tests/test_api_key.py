"""The head's API with the quick-start key (issue 13): /v1 answers 401 without the key and 200 with it,
and /health answers without it, as the README says; beyond loopback the API proxy refuses every other route
(issue 24, finding 6)."""

import base64
import json
import os

import yaml

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


# From the worker, as anyone on the management network or the fabric would (issue 24, finding 6): vLLM checks the
# key under /v1 only, so the head serves the API through the proxy, which passes /v1/... and /health and refuses
# every other route beyond loopback (vLLM itself listens on 127.0.0.1:8889). Without the proxy, /invocations answers
# a completion without the key: tests/unit/sim/test_vllm_standin.py::test_pair_routes_outside_v1_answer_without_the_key.
REMOTE_PROBE = r"""
import json, os, sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
key, addresses = os.environ['DGX_PROBE_KEY'], sys.argv[1:]
out = {}
for address in addresses:
    for label, method, path, body, auth in (
            ('invocations', 'POST', '/invocations', {'prompt': 'x', 'max_tokens': 1}, None),
            ('invocations-key', 'POST', '/invocations', {'prompt': 'x', 'max_tokens': 1}, key),
            ('tokenize', 'POST', '/tokenize', {'prompt': 'x'}, None),
            ('metrics', 'GET', '/metrics', None, None),
            ('version', 'GET', '/version', None, None),
            ('dot-segment', 'GET', '/v1/../metrics', None, None),
            ('encoded-dot', 'GET', '/v1/%2e%2e/metrics', None, None),
            ('health', 'GET', '/health', None, None),
            ('models-no-key', 'GET', '/v1/models', None, None),
            ('models-key', 'GET', '/v1/models', None, key),
            ('completion-key', 'POST', '/v1/completions', {'prompt': 'x', 'max_tokens': 1}, key)):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request('http://%s:8888%s' % (address, path), data=data, method=method)
        if data is not None:
            req.add_header('Content-Type', 'application/json')
        if auth:
            req.add_header('Authorization', 'Bearer ' + auth)
        try:
            with opener.open(req, timeout=60) as resp:
                out['%s %s' % (address, label)] = resp.status
        except urllib.error.HTTPError as err:
            out['%s %s' % (address, label)] = err.code
print(json.dumps(out))
"""
SIM_RUNTIME = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                           "inventories", "sim", "group_vars", "all", "runtime.yml")
HOSTS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inventory", "hosts.yml")


def test_beyond_loopback_only_v1_and_health_answer(host):
    if "spark-head" in host.backend.get_hostname():
        # vLLM listens on loopback only; the proxy (a dynamic user, not root) holds the API port
        assert host.socket("tcp://127.0.0.1:8889").is_listening
        assert not host.socket("tcp://0.0.0.0:8889").is_listening
        user = host.check_output("systemctl show -p User -p DynamicUser --value dgxspark-vllm-proxy.service")
        assert "yes" in user.split(), user
        pid = host.check_output("systemctl show -p MainPID --value dgxspark-vllm-proxy.service").strip()
        assert pid != "0" and host.check_output("stat -c %%u /proc/%s" % pid).strip() != "0"
        return
    with open(SIM_RUNTIME, encoding="utf-8") as handle:
        key = yaml.safe_load(handle)["runtime_vllm_api_key"]
    with open(HOSTS_FILE, encoding="utf-8") as handle:
        head = yaml.safe_load(handle)["all"]["children"]["spark"]["children"]["spark_head"]["hosts"]["spark-head"]
    addresses = [head["ansible_host"], head["dgxspark_fabric_rails"][0]["ipv4"]]
    proc = host.run("echo %s | base64 -d | DGX_PROBE_KEY=%s python3 - %s"
                    % (base64.b64encode(REMOTE_PROBE.encode()).decode(), key, " ".join(addresses)))
    assert proc.rc == 0, proc.stderr
    got = json.loads(proc.stdout)
    for address in addresses:
        seen = {label.split(" ", 1)[1]: status for label, status in got.items() if label.startswith(address + " ")}
        assert seen == {"invocations": 403, "invocations-key": 403, "tokenize": 403, "metrics": 403, "version": 403,
                        "dot-segment": 403, "encoded-dot": 403, "health": 200, "models-no-key": 401, "models-key": 200,
                        "completion-key": 200}, (address, seen)
