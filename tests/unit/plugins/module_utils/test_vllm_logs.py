# -*- coding: utf-8 -*-
"""plugins/module_utils/vllm_logs.py and the service_first_error / service_error_lines / service_lost_ranks filters:
which node's rank log shows the first error (journalctl -o short-unix and docker logs --timestamps lines), and which
worker ranks a hung head lost (systemctl show --timestamp=unix and docker inspect state lines)."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.filter.service_logs import FilterModule
import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils.vllm_logs import first_error, line_time, lost_ranks, strip_times, unit_state

FILTERS = FilterModule().filters()

HEAD_JOURNAL = [
    '1764601800.100000 spark-head dgxspark-vllm[900]: (APIServer pid=900) INFO 12-01 15:10:00 [api.py:1] vLLM API server',
    '1764601830.500000 spark-head dgxspark-vllm[900]: (APIServer pid=900) ERROR 12-01 15:10:30 [launcher.py:9] the head lost '
    'tensor-parallel node rank 1 (ip=192.168.150.2)',
]
WORKER_JOURNAL = [
    '1764601790.000000 spark-worker dgxspark-vllm[700]: (Headless pid=700) WARNING 12-01 15:09:50 [env.py:1] NCCL_IB_GID_INDEX',
    '1764601829.900000 spark-worker dgxspark-vllm[700]: (Headless pid=700) ERROR 12-01 15:10:29 [hf.py:3] '
    'huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder',
]


def test_the_worker_whose_error_came_first_is_named():
    found = first_error([{'host': 'spark-head', 'lines': HEAD_JOURNAL}, {'host': 'spark-worker', 'lines': WORKER_JOURNAL}])
    assert found['host'] == 'spark-worker'
    assert found['time'] == 1764601829.9
    assert 'LocalEntryNotFoundError' in found['line']


def test_the_head_is_named_when_its_error_came_first():
    late_worker = [WORKER_JOURNAL[0], WORKER_JOURNAL[1].replace('1764601829.9', '1764601831.9')]
    found = first_error([{'host': 'spark-worker', 'lines': late_worker}, {'host': 'spark-head', 'lines': HEAD_JOURNAL}])
    assert found['host'] == 'spark-head' and 'lost tensor-parallel node rank 1' in found['line']


def test_docker_timestamps_and_nccl_errors():
    container = ['2025-12-01T15:10:28.123456789Z NCCL WARN NET/IB : Got completion with error 12',
                 '2025-12-01T15:10:29.000000000Z [rank1]: RuntimeError: NCCL error: unhandled system error']
    found = first_error([{'host': 'spark-worker', 'lines': container}, {'host': 'spark-head', 'lines': HEAD_JOURNAL}])
    assert found['host'] == 'spark-worker' and found['line'].startswith('2025-12-01T15:10:28.123456789Z NCCL WARN')
    assert abs(found['time'] - line_time(container[0])) < 1e-6


def test_no_error_no_untimed_lines_no_name():
    assert first_error([{'host': 'spark-head', 'lines': ['1764601800.1 spark-head x: INFO all good']}]) == {}
    assert first_error([{'host': 'spark-head', 'lines': ['ERROR without a time']}]) == {}
    assert first_error([]) == {} and first_error(None) == {}


def test_filters_strip_the_time_and_keep_error_lines():
    found = FILTERS['service_first_error']([{'host': 'spark-worker', 'lines': WORKER_JOURNAL}])
    assert found['line'].startswith('spark-worker dgxspark-vllm[700]: (Headless pid=700) ERROR')
    assert strip_times(['2025-12-01T15:10:28Z x', 'plain']) == ['x', 'plain']
    lines = ['Started vLLM', 'ValueError: --max-model-len 2000000 is over the model maximum',
             'dgxspark_nccl_resolve.py: FAILED: no GID carries this address', 'Failed to start dgxspark-vllm.service',
             'INFO ready']
    assert FILTERS['service_error_lines'](lines) == lines[1:4]


# ---------------------------------------------------------------------------- lost ranks (a hung head)

HEAD_STATE = ('ActiveState=active SubState=running Result=success NRestarts=0 MainPID=900 '
              'ExecMainStartTimestamp=@1764601700')


@pytest.mark.parametrize('state, why', [
    ('ActiveState=inactive SubState=dead Result=success NRestarts=0 MainPID=0 ExecMainStartTimestamp=',
     'its unit is inactive (dead, result success)'),
    ('ActiveState=failed SubState=failed Result=start-limit-hit NRestarts=4 MainPID=0 ExecMainStartTimestamp=@1764601800',
     'its unit is failed (failed, result start-limit-hit)'),
    ('ActiveState=activating SubState=auto-restart Result=exit-code NRestarts=2 MainPID=0 ExecMainStartTimestamp=@1764601800',
     'its unit is activating (auto-restart, result exit-code)'),
    ('ActiveState=active SubState=running Result=success NRestarts=1 MainPID=1234 ExecMainStartTimestamp=@1764601790',
     "its rank's process started at 15:09:50 UTC, after the head's (15:08:20 UTC): the head's engine lost the one it formed with"),
    ('ActiveState=active SubState=running Result=success MainPID=0 ExecMainStartTimestamp=@1764601600',
     "its rank's process is gone (no main process)"),
    ('(unreachable)', 'its state could not be read ((unreachable))'),
], ids=['stopped', 'start-limit-hit', 'auto-restart', 'restarted-after-the-head', 'no-main-process', 'unreachable'])
def test_a_gone_worker_is_named_with_why(state, why):
    reports = [{'host': 'spark-head', 'rank': 0, 'state': HEAD_STATE}, {'host': 'spark-worker', 'rank': 1, 'state': state}]
    assert lost_ranks(reports, 'spark-head') == [{'host': 'spark-worker', 'rank': 1, 'why': why}]
    assert FILTERS['service_lost_ranks'](reports, 'spark-head') == lost_ranks(reports, 'spark-head')


def test_a_worker_that_started_before_the_head_and_runs_is_not_gone():
    worker = 'ActiveState=active SubState=running Result=success NRestarts=0 MainPID=700 ExecMainStartTimestamp=@1764601690'
    assert lost_ranks([{'host': 'spark-head', 'rank': 0, 'state': HEAD_STATE},
                       {'host': 'spark-worker', 'rank': 1, 'state': worker}], 'spark-head') == []


def test_the_container_kind_reads_the_containers_state():
    head = 'ActiveState=active SubState=exited Result=success MainPID=0 Running=true StartedAt=2025-12-01T15:08:20.123456789Z'
    stopped = 'ActiveState=active SubState=exited Result=success MainPID=0 Running=false StartedAt=2025-12-01T15:00:00Z'
    later = 'ActiveState=active SubState=exited Result=success MainPID=0 Running=true StartedAt=2025-12-01T15:09:50.5Z'
    earlier = 'ActiveState=active SubState=exited Result=success MainPID=0 Running=true StartedAt=2025-12-01T15:00:00Z'
    base = [{'host': 'h', 'rank': 0, 'state': head}]
    assert lost_ranks(base + [{'host': 'w', 'rank': 1, 'state': stopped}], 'h')[0]['why'] == 'its container does not run'
    assert lost_ranks(base + [{'host': 'w', 'rank': 1, 'state': later}], 'h')[0]['why'].startswith(
        "its rank's process started at 15:09:50 UTC, after the head's (15:08:20 UTC)")
    assert lost_ranks(base + [{'host': 'w', 'rank': 1, 'state': earlier}], 'h') == []


def test_unit_state_reads_key_value_pairs():
    assert unit_state(HEAD_STATE)['ExecMainStartTimestamp'] == '@1764601700'
    assert unit_state('') == {}
