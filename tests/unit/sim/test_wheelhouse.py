"""The sim's wheelhouse (sim/wheelhouse/requirements.txt -> /var/lib/spark-sim/wheels in the node image): what the
roles pip-install inside a node comes from it, so no scenario needs a package index."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PINS = REPO / 'sim' / 'wheelhouse' / 'requirements.txt'


def pins() -> dict[str, str]:
    found = {}
    for line in PINS.read_text().splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            match = re.fullmatch(r'([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9.]*)', line)
            assert match, 'not an exact pin: %r' % line
            found[match.group(1).lower().replace('-', '_')] = match.group(2)
    return found


def test_every_wheel_is_pinned_and_huggingface_hub_is_the_roles_version():
    defaults = yaml.safe_load((REPO / 'roles' / 'checkpoint' / 'defaults' / 'main.yml').read_text())
    assert pins()['huggingface_hub'] == defaults['checkpoint_huggingface_hub_version']


def test_the_sim_inventory_installs_from_the_image_wheelhouse_only():
    sim = yaml.safe_load((REPO / 'inventories' / 'sim' / 'group_vars' / 'all' / 'checkpoint.yml').read_text())
    dockerfile = (REPO / 'sim' / 'image' / 'Dockerfile').read_text()
    assert 'COPY wheelhouse/.wheels/ %s/' % sim['checkpoint_pip_find_links'] in dockerfile
    head = (REPO / 'roles' / 'checkpoint' / 'tasks' / 'head.yml').read_text()
    assert "['--no-index', '--find-links', checkpoint_pip_find_links]" in head
    runtime = yaml.safe_load((REPO / 'inventories' / 'sim' / 'group_vars' / 'all' / 'runtime.yml').read_text())
    assert '--no-index' in runtime['runtime_vllm_pip_args']


def test_the_image_hash_follows_the_pins():
    text = (REPO / 'sim' / 'spark-sim').read_text()
    assert 'hash_tree([NODE_TREE, APT_REPO_TREE, SIM / "image" / "Dockerfile"], base + wheel_key)' in text
    assert '"--no-deps"' in text   # exactly the listed wheels: a missing dependency fails in the node, never reaches an index
