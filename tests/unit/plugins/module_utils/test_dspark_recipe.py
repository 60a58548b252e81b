# -*- coding: utf-8 -*-
"""plugins/module_utils/dspark_recipe.py: the recipe's start-up read from a checkout, its switches; and the
start-up of the sim's stand-in checkout run under bash (steps, order, switches, fault mode)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.filter.dspark_recipe import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils.dspark_recipe import (
    SWITCHES, RecipeError, startup, switch_env)

REPO = Path(__file__).resolve().parents[4]
STANDIN = REPO / 'sim' / 'dspark-recipe-standin'
STANDIN_SRC = REPO / 'sim' / 'vllm-standin' / 'src'
REVISION = '9e165c30e2704aec5d9d593cce3eebd58bbef1cb'

DEFAULT_STEPS = [
    'encoder-install', 'hotfix-encoding-dsv4-issue21.py', 'hotfix-dsv4-issue55-tool-truncation.py',
    'hotfix-nvfp4-ds-mla-issue22.sh', 'hotfix-gb10-spin-wait.sh',
    'hotfix-dsv4-mtp-buffer-50312.sh', 'hotfix-dsv4-adaptive-topk-50004.sh', 'hotfix-dsv4-skip-topk-49486.sh',
    'hotfix-dsv4-dense-prefill-indexer-48407.sh', 'hotfix-dsv4-skip-empty-c128-48957.sh',
    'hotfix-dsv4-flashmla-workspace-50298.sh', 'hotfix-dsv4-grammar-advance.sh',
    'hotfix-vllm-empty-encoder-output.py', 'hotfix-dsv4-issue27-partial-prefill-concurrency.py',
    'hotfix-dsv4-issue43-decode-fairness-and-diag.py', 'hotfix-dsv4-issue26-hybrid-swa-min.py',
    'hotfix-dsv4-suppress-stops-in-reasoning.py',
]


def standin_compose():
    return yaml.safe_load((STANDIN / 'docker-compose.dspark.yml').read_text())


def compose(script, volumes=None):
    return {'services': {'vllm-dspark': {'command': ['bash', '-lc', script],
                                         'volumes': volumes if volumes is not None else ['${P:-./patches}:/opt/dspark-patches:ro']}}}


def test_startup_of_the_standin_checkout():
    got = startup(standin_compose(), '/opt/dgxspark/dspark-recipe/')
    assert got['script'].endswith(';\nexec "$$@"')
    assert 'exec /usr/local/bin/vllm serve' not in got['script']
    assert '/opt/dgxspark/dspark-recipe/patches:/opt/dspark-patches:ro' in got['mounts']
    assert '/opt/dgxspark/dspark-recipe/patches/hotfix-dsv4-issue55-tool-truncation.py:/opt/hotfix-dsv4-issue55-tool-truncation.py:ro' \
        in got['mounts']
    assert '/opt/dgxspark/dspark-recipe/vllm_patch_gb10:/opt/vllm-gb10-hybrid-nvfp4:rw' in got['mounts']
    assert not [m for m in got['mounts'] if '/cache/huggingface' in m]  # the HF cache is the collection's own mount
    assert len(got['mounts']) == 11


@pytest.mark.parametrize('doc, message', [
    ({'services': {'other': {}}}, "services ['other'], expected the recipe's service vllm-dspark"),
    (compose('true'), 'has 0 "exec /usr/local/bin/vllm serve", expected exactly one'),
    (compose('exec /usr/local/bin/vllm serve a; exec /usr/local/bin/vllm serve b'), 'has 2 "exec /usr/local/bin/vllm serve"'),
    (compose('echo ${HOST_VAR}; exec /usr/local/bin/vllm serve m'), 'interpolates a compose variable before its exec'),
    (compose('echo $$OK; exec /usr/local/bin/vllm serve m', volumes=[]), 'mounts no ./patches directory'),
    (compose('exec /usr/local/bin/vllm serve m', volumes=['${P:-./../etc}:/opt/dspark-patches']), 'expected a path inside'),
    ({'services': {'vllm-dspark': {'command': 'vllm serve'}}}, "expected [bash, -lc, <start-up script>]"),
])
def test_a_checkout_not_shaped_like_the_recipe_fails_clearly(doc, message):
    with pytest.raises(RecipeError) as err:
        startup(doc, '/r')
    assert message in str(err.value)


def test_switches_default_to_the_recipes_and_map_to_dspark_names():
    env = switch_env({})
    assert env == {'DSPARK_SKIP_ISSUE22_HOTFIX': '0', 'DSPARK_SKIP_SPIN_WAIT_HOTFIX': '0', 'DSPARK_SKIP_HOTFIX': '0',
                   'DSPARK_SKIP_SUPPRESS_STOPS_HOTFIX': '0', 'DSPARK_SUPPRESS_STOPS_IN_REASONING': '1',
                   'DSPARK_ENABLE_ISSUE31_GPU_HOTFIX': '0', 'DSPARK_ENABLE_ASSISTANT_FINAL_HOTFIX': '0',
                   'DSPARK_ISSUE43_SCHED_DIAG': '0', 'DSPARK_MAX_INFLIGHT_PREFILLS': '2', 'DSPARK_ENCODING_FILE': ''}
    assert switch_env({'runtime_dspark_skip_hotfix': True})['DSPARK_SKIP_HOTFIX'] == '1'
    # The stand-in checkout's compose has the same switch names with the same defaults (as the recipe's compose).
    environment = standin_compose()['services']['vllm-dspark']['environment']
    for name, default, _kind in SWITCHES:
        assert environment[name] == '${%s:-%s}' % (name, env[name]), name


def test_role_defaults_and_specs_carry_every_switch():
    defaults = yaml.safe_load((REPO / 'roles' / 'runtime' / 'defaults' / 'main.yml').read_text())
    specs = yaml.safe_load((REPO / 'roles' / 'runtime' / 'meta' / 'argument_specs.yml').read_text())['argument_specs']['main']['options']
    for name, default, _kind in SWITCHES:
        var = 'runtime_dspark_' + name[len('DSPARK_'):].lower()
        assert defaults[var] == default, var
        assert specs[var]['default'] == default, var
    assert sorted(v for v in defaults if v.startswith('runtime_dspark_')) == sorted(
        'runtime_dspark_' + n[len('DSPARK_'):].lower() for n, _d, _k in SWITCHES)


@pytest.mark.parametrize('variables, message', [
    ({'runtime_dspark_skip_hotfix': 'yes'}, "runtime_dspark_skip_hotfix is 'yes' (str), expected a boolean"),
    ({'runtime_dspark_max_inflight_prefills': 4}, 'runtime_dspark_max_inflight_prefills is 4 (int), expected an integer from 1 to 3'),
    ({'runtime_dspark_encoding_file': 'a\nb'}, 'expected a one-line string'),
])
def test_bad_switch_values_fail_naming_the_variable(variables, message):
    with pytest.raises(RecipeError) as err:
        switch_env(variables)
    assert message in str(err.value)
    with pytest.raises(Exception) as err:
        FilterModule().filters()['dspark_recipe_env'](variables)
    assert 'dspark_recipe_env: ' in str(err.value)


# ---------------------------------------------------------------------------- the stand-in start-up under bash

def run_startup(tmp_path, env=None, encoder=True):
    """The stand-in checkout's start-up as the collection runs it: /opt and /cache rebased under tmp_path."""
    opt = tmp_path / 'opt'
    (opt / 'dspark-patches').mkdir(parents=True)
    for item in (STANDIN / 'patches').iterdir():
        shutil.copy2(str(item), str(opt / 'dspark-patches' / item.name))
        if item.suffix == '.py':
            shutil.copy2(str(item), str(opt / item.name))
    hub = tmp_path / 'cache' / 'huggingface' / 'hub'
    snap = hub / 'models--deepseek-ai--DeepSeek-V4-Flash-0731' / 'snapshots' / REVISION / 'encoding'
    snap.mkdir(parents=True)
    if encoder:
        (snap / 'encoding_dsv4.py').write_text('# encoder\n')
    script = startup(standin_compose(), '/unused')['script'].replace('$$', '$')
    script = script.replace('/opt/', str(opt) + '/').replace('/cache/huggingface', str(tmp_path / 'cache' / 'huggingface'))
    log = tmp_path / 'startup.log'
    run_env = {'PATH': os.path.dirname(sys.executable) + ':/usr/bin:/bin', 'PYTHONPATH': str(STANDIN_SRC),
               'VLLM_STANDIN_STARTUP_LOG': str(log), 'DSPARK_MODEL': 'deepseek-ai/DeepSeek-V4-Flash-0731',
               'DSPARK_REVISION': REVISION, 'HOME': str(tmp_path)}
    run_env.update(switch_env({}))
    run_env.update(env or {})
    # python3 in the script is the stand-in image's; here the test interpreter.
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'python3').symlink_to(sys.executable)
    run_env['PATH'] = str(bindir) + ':' + run_env['PATH']
    script = script.replace('export PATH="/usr/local/bin:/usr/bin:${PATH:-}";', '')
    proc = subprocess.run(['bash', '-c', script, 'dgxspark-dspark-startup', sys.executable, '-c',
                           'from vllm import standin_startup; standin_startup.record_serve()'],
                          env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120,
                          check=False)
    steps = [line.split(' ', 1)[1] for line in log.read_text().splitlines()] if log.exists() else []
    return proc, steps


def test_standin_startup_runs_the_recipe_steps_in_order_then_execs(tmp_path):
    proc, steps = run_startup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [s.split(' ')[0] for s in steps]
    assert names == DEFAULT_STEPS + ['vllm-serve']
    assert steps[0].endswith('/snapshots/%s/encoding/encoding_dsv4.py' % REVISION)
    assert 'DSPARK start-up (stand-in): applied hotfix-dsv4-issue55-tool-truncation.py' in proc.stderr


@pytest.mark.parametrize('switch, value, skipped, added', [
    ('DSPARK_SKIP_SPIN_WAIT_HOTFIX', '1', ['hotfix-gb10-spin-wait.sh'], []),
    ('DSPARK_SKIP_ISSUE22_HOTFIX', '1', ['hotfix-nvfp4-ds-mla-issue22.sh'], []),
    ('DSPARK_SKIP_HOTFIX', '1', [s for s in DEFAULT_STEPS if s.startswith('hotfix-dsv4-') and s.endswith('.sh')], []),
    ('DSPARK_SKIP_SUPPRESS_STOPS_HOTFIX', '1', ['hotfix-dsv4-suppress-stops-in-reasoning.py'], []),
    ('DSPARK_ENABLE_ISSUE31_GPU_HOTFIX', '1', [], ['hotfix-dsv4-issue31-v2-thinking-budget-gpu.py']),
    ('DSPARK_ENABLE_ASSISTANT_FINAL_HOTFIX', '1', [], ['hotfix-dsv4-assistant-final-continuation.py']),
    ('VLLM_API_KEY', 'k', [], ['hotfix-vllm-redact-api-key-log.sh', 'hotfix-vllm-redact-api-key-log.sh --status']),
])
def test_standin_startup_follows_its_switches(tmp_path, switch, value, skipped, added):
    proc, steps = run_startup(tmp_path, {switch: value})
    assert proc.returncode == 0, proc.stderr
    names = [s.split(' ')[0] if s.startswith('encoder-install') else s for s in steps]
    for step in skipped:
        assert step not in names
    assert [s for s in names if s not in DEFAULT_STEPS + ['vllm-serve']] == added
    assert [s for s in DEFAULT_STEPS if s in names] == [s for s in DEFAULT_STEPS if s not in skipped]


def test_standin_startup_without_encoder_warns_and_skips_it(tmp_path):
    proc, steps = run_startup(tmp_path, encoder=False)
    assert proc.returncode == 0
    assert 'WARN: encoding_dsv4.py not found' in proc.stderr
    assert steps[0] == 'hotfix-dsv4-issue55-tool-truncation.py'


def test_a_failing_step_stops_the_start_before_serving(tmp_path):
    proc, steps = run_startup(tmp_path, {'VLLM_STANDIN_FAIL_STEP': 'hotfix-nvfp4-ds-mla-issue22.sh'})
    assert proc.returncode == 1
    assert 'FATAL: hotfix-nvfp4-ds-mla-issue22.sh failed' in proc.stderr
    assert 'vllm-serve' not in steps and steps[-1] == 'hotfix-dsv4-issue55-tool-truncation.py'
