"""The checkpoint tools venv's hash-locked requirements (roles/checkpoint/files/hf-tools-requirements.txt) are the
one list of what the role pip-installs on the head and of the sim's wheelhouse (sim/spark-sim downloads exactly
that lock, hashes checked, into /var/lib/spark-sim/wheels), so no scenario needs a package index."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
LOCK = REPO / 'roles' / 'checkpoint' / 'files' / 'hf-tools-requirements.txt'
sys.path.insert(0, str(REPO / 'collections'))

from ansible_collections.dgxspark.cluster.plugins.module_utils import pip_plan  # noqa: E402


def _spark_sim():
    loader = importlib.machinery.SourceFileLoader('spark_sim_wheelhouse', str(REPO / 'sim' / 'spark-sim'))
    spec = importlib.util.spec_from_loader('spark_sim_wheelhouse', loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_every_line_of_the_lock_is_a_pin_with_sha256_hashes():
    text = LOCK.read_text()
    pins = pip_plan.lock_pins(text)   # raises on a line without a hash, an option, a marker, a name twice
    assert len(pins) == 15 and pins['huggingface-hub']
    # every pinned package lists a hash of its wheel and of its sdist at least (every file PyPI has of that version)
    blocks = re.findall(r'^([A-Za-z0-9_.-]+)==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)', text, re.M)
    assert len(blocks) == len(pins)
    assert all(body.count('--hash=') >= 2 for _name, body in blocks)
    assert len(set(re.findall(r'sha256:([0-9a-f]{64})', text))) == text.count('--hash=')


def test_the_role_default_is_the_locked_huggingface_hub():
    defaults = yaml.safe_load((REPO / 'roles' / 'checkpoint' / 'defaults' / 'main.yml').read_text())
    pins = pip_plan.lock_pins(LOCK.read_text())
    assert pins['huggingface-hub'] == defaults['checkpoint_huggingface_hub_version']


def test_the_sim_wheelhouse_is_the_lock():
    sim = _spark_sim()
    assert sim.WHEELHOUSE_LOCKS == [LOCK]
    assert not (REPO / 'sim' / 'wheelhouse' / 'requirements.txt').exists()   # no second list to drift
    text = (REPO / 'sim' / 'spark-sim').read_text()
    assert 'pins = "".join(lock.read_text() for lock in WHEELHOUSE_LOCKS)' in text   # the image follows the lock
    assert 'hash_tree([NODE_TREE, APT_REPO_TREE, SIM / "image" / "Dockerfile"], base + wheel_key)' in text
    assert '"--no-deps"' in text   # exactly the locked wheels: a missing dependency fails in the node


def test_the_role_installs_the_lock_only_with_hashes_required():
    head = (REPO / 'roles' / 'checkpoint' / 'tasks' / 'head.yml').read_text()
    assert "'--require-hashes', '--no-deps', '--only-binary=:all:']" in head
    assert "+ ['-r', __checkpoint_tools_lock] }}" in head
    assert 'huggingface_hub==' not in head   # no requirement outside the lock
    assert "['--no-index', '--find-links', checkpoint_pip_find_links]" in head


def test_the_sim_inventory_installs_from_the_image_wheelhouse_only():
    sim = yaml.safe_load((REPO / 'inventories' / 'sim' / 'group_vars' / 'all' / 'checkpoint.yml').read_text())
    dockerfile = (REPO / 'sim' / 'image' / 'Dockerfile').read_text()
    assert 'COPY wheelhouse/.wheels/ %s/' % sim['checkpoint_pip_find_links'] in dockerfile
    runtime = yaml.safe_load((REPO / 'inventories' / 'sim' / 'group_vars' / 'all' / 'runtime.yml').read_text())
    assert '--no-index' in runtime['runtime_vllm_pip_args']
