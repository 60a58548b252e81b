# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One tick of the serving watchdog on the head (dgxspark-vllm-watchdog.service, run by its timer).

    dgxspark_vllm_watchdog.py --config /etc/dgxspark/vllm-watchdog.json

``Restart=always`` restarts a rank that exits; nothing restarts one that hangs while
``/health`` keeps answering 200 (seed 000: a worker pinned for 30+ minutes while the
HTTP API kept answering; seed 003: the head lost a TP worker). Each tick reads vLLM's
``/metrics`` on loopback (the parser is the collection's ``vllm_metrics.py``, installed
beside this file) and decides:

- busy (requests running or waiting) and neither ``prompt_tokens_total``,
  ``generation_tokens_total`` nor ``kv_cache_usage_perc`` moved for ``stall_sec``: wedged.
  vLLM counts a prompt only when its prefill ends; the KV usage grows at every engine
  step of a long prefill, so a slow prefill is progress, not a wedge;
- idle, and no 1-token probe for ``stall_sec``: a 1-token completion (the key read from
  the secret environment file, never argv); no answer within ``probe_timeout`` while
  ``/health`` answers 200 and nothing moved meanwhile: wedged.

A wedge is logged (journal of this unit) with its evidence: the counters, since when
nothing moved, the head rank's last log lines and every rank's unit state the head can
read. Then, if ``restart`` is true and fewer than ``max_restarts`` restarts happened in
the last ``window_sec``: ``systemctl restart`` of the head's serving unit. The head has no
access to a worker's systemd (no root trust between the nodes): a worker rank follows
its head (it leaves when its head goes; its unit's Restart= starts it again and it joins
the new head). Past the bound, or with ``restart`` false, it only reports. The state
(last sample, restart times, counts) is ``<state_dir>/state.json`` (root only).
Exit 0 after every tick it could make (even a wedge), 1 on a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# the collection's plugins/module_utils/vllm_metrics.py, installed beside this file by the service role
import vllm_metrics  # noqa: E402 pylint: disable=wrong-import-position

PROG = 'dgxspark-vllm-watchdog'
KEYS = ('url', 'unit', 'kind', 'container_name', 'served_model_name', 'secret_env_file', 'state_dir', 'stall_sec',
        'interval_sec', 'probe_timeout', 'restart', 'max_restarts', 'window_sec', 'log_lines', 'workers')


def say(message):
    print('%s: %s' % (PROG, message), flush=True)


def read_api_key(path):
    """VLLM_API_KEY from an EnvironmentFile-style file; "" when the file or the key is absent."""
    try:
        with open(path, encoding='utf-8') as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ''
    for line in lines:
        key, sep, value = line.strip().partition('=')
        if sep and key.strip() == 'VLLM_API_KEY':
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
                value = value[1:-1]
            return value
    return ''


def _open(url, timeout, body=None, key=''):
    headers = {'Accept': 'application/json'}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers['Content-Type'] = 'application/json'
    if key:
        headers['Authorization'] = 'Bearer ' + key
    req = urllib.request.Request(url, data=data, headers=headers, method='POST' if body is not None else 'GET')
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # no proxy: it would see the key
    return opener.open(req, timeout=timeout)  # nosec - the head's own API on loopback


def read_metrics(conf):
    with _open(conf['url'] + '/metrics', 10) as resp:
        return vllm_metrics.parse_metrics(resp.read().decode('utf-8', 'replace'))


def health(conf):
    try:
        with _open(conf['url'] + '/health', 10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, 'reason', exc))


def probe(conf):
    """'ok', 'timeout' or what else went wrong, for a 1-token completion."""
    body = {'model': conf['served_model_name'], 'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}
    try:
        with _open(conf['url'] + '/v1/completions', conf['probe_timeout'], body, read_api_key(conf['secret_env_file'])) as resp:
            payload = json.loads(resp.read().decode() or 'null')
    except urllib.error.HTTPError as exc:
        return 'HTTP %s' % exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, 'reason', exc)
        if isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError) or 'timed out' in str(reason):
            return 'timeout'
        return str(reason)
    choices = payload.get('choices') if isinstance(payload, dict) else None
    return 'ok' if isinstance(choices, list) and choices else 'answered without a choice'


def unit_show(unit):
    out = subprocess.run(['systemctl', 'show', unit, '--property=ActiveState', '--property=SubState',
                          '--property=InvocationID', '--property=MainPID', '--property=ExecMainStartTimestamp',
                          '--property=NRestarts'], capture_output=True, text=True, check=False).stdout
    return dict(line.split('=', 1) for line in out.splitlines() if '=' in line)


def rank_log(conf, invocation):
    n = str(int(conf['log_lines']))
    if conf['kind'] == 'container':
        argv = ['docker', 'logs', '--timestamps', '--tail', n, conf['container_name']]
    elif invocation:
        argv = ['journalctl', '_SYSTEMD_INVOCATION_ID=' + invocation, '--lines', n, '--no-pager', '--output', 'short-unix']
    else:
        argv = ['journalctl', '--unit', conf['unit'], '--lines', n, '--no-pager', '--output', 'short-unix']
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


def load_state(path):
    try:
        with open(path, encoding='utf-8') as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(path, state):
    tmp = path + '.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as handle:
        json.dump(state, handle, sort_keys=True)
    os.replace(tmp, path)


def stamp(t):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(t))


def load_config(path):
    with open(path, encoding='utf-8') as handle:
        conf = json.load(handle)
    missing = [k for k in KEYS if k not in conf]
    if missing:
        raise ValueError('%s lacks %s' % (path, ', '.join(missing)))
    conf['url'] = conf['url'].rstrip('/')
    return conf


def act_on_wedge(conf, state, why, show, now):
    """Log the evidence, then restart the head's rank when the configuration and the bound allow it."""
    episode = show.get('InvocationID', '')
    counts = state.setdefault('counts', {'wedges': 0, 'restarts': 0, 'not_restarted': 0})
    if state.get('reported') == episode:
        say('still wedged (reported at %s): %s' % (stamp(state.get('reported_at', now)), why))
        return
    state['reported'], state['reported_at'] = episode, now
    counts['wedges'] += 1
    say('WEDGED: %s' % why)
    say('head %s: %s; MainPID %s, started %s, NRestarts %s' % (
        conf['unit'], '/'.join([show.get('ActiveState', '?'), show.get('SubState', '?')]), show.get('MainPID', '?'),
        show.get('ExecMainStartTimestamp', '?'), show.get('NRestarts', '?')))
    for line in rank_log(conf, show.get('InvocationID', ''))[-int(conf['log_lines']):]:
        say('head rank log | %s' % line)
    for host, rank in conf['workers']:
        say('worker node rank %s (%s): its unit and log are not readable from the head (journalctl -u %s there)'
            % (rank, host, conf['unit']))
    if not conf['restart']:
        counts['not_restarted'] += 1
        say('not restarted: service_watchdog_restart is false (reported only)')
        return
    kept, left = vllm_metrics.restarts_left(state.get('restarts', []), now, conf['window_sec'], conf['max_restarts'])
    state['restarts'] = kept
    if left <= 0:
        counts['not_restarted'] += 1
        say('not restarted: the bound is reached, %d restarts in the last %d s (service_watchdog_max_restarts %d in '
            'service_start_limit_interval_sec %d); restart the ranks yourself (the workers, then the head) or run '
            'site.yml with service_restart_hung=true' % (len(kept), conf['window_sec'], conf['max_restarts'], conf['window_sec']))
        return
    say('restarting the ranks: the workers follow their head (the head cannot reach their systemd: a worker rank leaves '
        'when its head goes and its Restart= starts it again), then the head: systemctl restart %s (restart %d of at most %d '
        'in %d s)' % (conf['unit'], len(kept) + 1, conf['max_restarts'], conf['window_sec']))
    state['restarts'] = kept + [now]
    counts['restarts'] += 1
    state.pop('stall', None)
    proc = subprocess.run(['systemctl', 'restart', '--no-block', conf['unit']], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        say('systemctl restart %s failed (%d): %s' % (conf['unit'], proc.returncode, proc.stderr.strip()))
    else:
        say('restarted %s at %s' % (conf['unit'], stamp(now)))


def tick(conf, state, now=None):
    """One watchdog decision; mutates and returns ``state``."""
    now = time.time() if now is None else now
    show = unit_show(conf['unit'])
    if show.get('ActiveState') != 'active':
        say('%s is %s: nothing to watch (systemd restarts a rank that exits)' % (conf['unit'], show.get('ActiveState', '?')))
        state.pop('stall', None)
        return state
    try:
        metrics = read_metrics(conf)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        say('%s/metrics not readable (%s): starting, or not serving; no verdict' % (conf['url'], getattr(exc, 'reason', exc)))
        return state
    sample = vllm_metrics.sample_of(metrics, now)
    if sample is None:
        say('%s/metrics has no %s: no verdict' % (conf['url'], ' / '.join(vllm_metrics.COUNTERS)))
        return state
    incarnation = show.get('InvocationID') or show.get('ExecMainStartTimestamp', '')
    stall, verdict = vllm_metrics.assess(state.get('stall', {}), sample, incarnation, conf['stall_sec'])
    state['stall'] = stall
    if verdict['status'] in ('baseline', 'progress'):
        state.pop('reported', None)       # a new process, or the engine moved: a later wedge is a new one
    if verdict['status'] == 'stalled':
        act_on_wedge(conf, state, 'requests are in and nothing moved since %s: %s' % (
            stamp(stall['still_since']), vllm_metrics.evidence_line(sample, verdict, conf['stall_sec'])), show, now)
        return state
    idle = sample['running'] <= 0 and sample['waiting'] <= 0
    if not idle or now - state.get('probed_at', 0) < conf['stall_sec']:
        if verdict['status'] in ('waiting', 'progress'):
            say('%s: %s' % (verdict['status'], vllm_metrics.evidence_line(sample, verdict, conf['stall_sec'])))
        return state
    started = time.time()
    result = probe(conf)
    state['probed_at'] = now
    if result == 'ok':
        return state
    if result != 'timeout':
        say('the 1-token completion failed (%s): not a wedge (/health and systemd decide that)' % result)
        return state
    status = health(conf)
    try:
        after = vllm_metrics.sample_of(read_metrics(conf), time.time())
    except (urllib.error.URLError, OSError, ValueError):
        after = None
    moved = after is not None and any(after[k] != sample[k] for k in ('prompt', 'generation', 'kv'))
    if status == 200 and not moved:
        evidence = vllm_metrics.evidence_line(after or sample, {'still': time.time() - started}, conf['stall_sec'])
        act_on_wedge(conf, state, '/health answers 200 but the 1-token completion got no answer within %s s (probe sent '
                     '%s; nothing moved meanwhile: %s)' % (conf['probe_timeout'], stamp(started), evidence), show, now)
    else:
        say('the 1-token completion got no answer within %s s; /health %s, counters moved: %s: not a wedge'
            % (conf['probe_timeout'], status, moved))
    return state


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument('--config', required=True)
    args = parser.parse_args(argv)
    try:
        conf = load_config(args.config)
    except (OSError, ValueError) as exc:
        say('bad configuration: %s' % exc)
        return 1
    path = os.path.join(conf['state_dir'], 'state.json')
    state = tick(conf, load_state(path))
    save_state(path, state)
    write_metrics(state)
    return 0


def write_metrics(state, now=None):
    """dgxspark_watchdog_* for node exporter's textfile collector (textfile_metrics.py, installed by the metrics role
    beside this file; without it, or without its directory, the metrics are off). Never fails a tick."""
    try:
        import textfile_metrics  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    counts = state.get('counts', {})
    samples = [('dgxspark_watchdog_stalls_total', {}, counts.get('wedges', 0)),
               ('dgxspark_watchdog_restarts_total', {}, counts.get('restarts', 0)),
               ('dgxspark_watchdog_not_restarted_total', {}, counts.get('not_restarted', 0)),
               ('dgxspark_watchdog_last_tick_timestamp_seconds', {}, round(time.time() if now is None else now, 3))]
    try:
        textfile_metrics.write('watchdog', samples)
    except (OSError, ValueError) as exc:
        say('could not write the watchdog metrics: %s' % exc)


if __name__ == '__main__':
    sys.exit(main())
