# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection pip-installs on the nodes, and how: one source of truth (pure functions, no I/O).

Standard library only, never imports ``ansible`` (``plugins/filter/pip.py`` wraps these functions and
turns ``PipPlanError`` into ``AnsibleFilterError``).

Two installs:

- The checkpoint role's tools venv (huggingface_hub and what it needs) installs a hash-locked requirements
  file, ``roles/checkpoint/files/hf-tools-requirements.txt``, with ``--require-hashes --no-deps``:
  ``lock_pins()`` reads it and refuses a line without a sha256.
- The runtime role's venv kind installs torch and vLLM. torch comes from ``runtime_torch_index_url`` as the only
  index, vLLM from its own index with a constraint that pins the torch the venv then holds, local version label
  included (PyPI accepts no local versions, so no other index can offer that torch). ``vllm_install_plan()``
  builds every argv of that sequence; the role runs them in this order::

      probe      pip install --dry-run --no-deps --ignore-installed --quiet --report - <vllm spec>
                 (torch_requirements() reads vLLM's own torch requirements from its report)
      torch      pip install --index-url <torch index> <torch requirements or runtime_torch_spec>
                 (with torch_env: the extra indexes and wheel directories of pip's configuration emptied)
      installed  python -c ...   ({"torch": "2.9.0+cu130", "torchaudio": ..., "torchvision": ...} as JSON)
                 (torch_constraints() writes them as a constraints file)
      vllm       pip install <runtime_vllm_pip_args> --constraint <file> <vllm spec>
      reinstall  pip install --force-reinstall --no-deps <runtime_vllm_pip_args> <wheel>   (a local wheel only)

  With ``--extra-index-url`` (the code before this) pip took the highest torch of every index, so a torch
  published on PyPI above the torch index's won (dependency confusion).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

__all__ = ['PipPlanError', 'TORCH_INDEX_NAMES', 'canonical_name', 'lock_pins', 'torch_requirements',
           'vllm_install_plan', 'torch_constraints']

# The packages of vLLM's requirements that come from the torch index (the CUDA 13 builds, +cu130).
TORCH_INDEX_NAMES = ('torch', 'torchvision', 'torchaudio')

# The pip options that choose where packages come from: never passed to the torch step.
_INDEX_OPTIONS_WITH_VALUE = ('--index-url', '-i', '--extra-index-url', '--find-links', '-f')
_INDEX_FLAGS = ('--no-index',)

_NAME = r'[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?'
_PIN = re.compile(r'(%s)==([0-9][A-Za-z0-9.!+_-]*)' % _NAME)
_HASH = re.compile(r'--hash=sha256:([0-9a-f]{64})')
_REQUIREMENT = re.compile(r'\s*(%s)\s*(\[[^\]]*\])?\s*([^;]*?)\s*(?:;\s*(.*?))?\s*' % _NAME)
# PEP 440, local version label included (2.9.0+cu130, 2.10.0.dev20250101+cu130).
_VERSION = re.compile(r'(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?'
                      r'(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?')

# Prints {name: installed version or null} for the names in argv, as JSON (the venv's own Python).
_INSTALLED = ('import importlib.metadata as m, json, sys; '
              'print(json.dumps({n: next((d.version for d in m.distributions(name=n)), None) for n in sys.argv[1:]},'
              ' sort_keys=True))')


class PipPlanError(ValueError):
    """A lock, a report or a setting the install cannot use."""


def canonical_name(name: str) -> str:
    """PEP 503 normalised project name: ``PyYAML`` -> ``pyyaml``, ``huggingface_hub`` -> ``huggingface-hub``."""
    return re.sub(r'[-_.]+', '-', name).lower()


def _logical_lines(text: str) -> List[str]:
    """Lines of a requirements file with comments removed and backslash continuations joined."""
    out, current = [], ''
    for raw in text.splitlines():
        line = re.sub(r'(^|\s)#.*$', '', raw).rstrip()
        if line.endswith('\\'):
            current += line[:-1] + ' '
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ''
    if current.strip():
        out.append(current.strip())
    return out


def lock_pins(text: str) -> Dict[str, str]:
    """The pins of a hash-locked requirements file: ``{canonical name: version}``.

    Input (pip's requirements format, ``pip install --require-hashes`` reads it)::

        # comment
        huggingface_hub==2.4.0 \\
            --hash=sha256:13a6158b9e3393d9d3f248ce99074d50c2a0a1449fb9d8e2f710751e2084c188 \\
            --hash=sha256:42ecfd93ede47bdd333daebbf66a32d7bfe2e18752754fe4d2d4f98a0179d801

    Every line must be ``name==version`` followed by one or more ``--hash=sha256:<64 hex>`` and nothing else
    (no option, no marker, no URL, no name twice); anything else raises PipPlanError naming the line.
    """
    pins: Dict[str, str] = {}
    for line in _logical_lines(text):
        tokens = line.split()
        match = _PIN.fullmatch(tokens[0])
        hashes = [_HASH.fullmatch(token) for token in tokens[1:]]
        if not match or not hashes or not all(hashes):
            raise PipPlanError('%r is not a pin with hashes (expected name==version --hash=sha256:<64 hex> ...)' % line)
        name = canonical_name(match.group(1))
        if name in pins:
            raise PipPlanError('%s is pinned twice' % name)
        pins[name] = match.group(2)
    if not pins:
        raise PipPlanError('the lock pins nothing')
    return pins


def torch_requirements(report: Union[str, Mapping[str, Any]],
                       names: Sequence[str] = TORCH_INDEX_NAMES) -> List[str]:
    """vLLM's own requirements on the torch index's packages, from pip's installation report.

    Input: the JSON ``pip install --dry-run --no-deps --ignore-installed --quiet --report - <vllm spec>`` prints
    (pip 22.2+), one item, the vLLM::

        {"version": "1", "install": [{"metadata": {"name": "vllm", "version": "0.11.0",
          "requires_dist": ["torch==2.9.0", "torchvision==0.24.0", "xformers; platform_machine == 'x86_64'",
                            "tensorizer>=2.9; extra == 'tensorizer'"]}}], "environment": {...}}

    Returns the requirement strings on ``names`` as written (a marker stays: pip evaluates it on the node), those
    under an extra left out: ``["torch==2.9.0", "torchvision==0.24.0"]``. Raises PipPlanError when the report
    holds no single package, when a requirement is a direct reference (``torch @ https://...`` would bypass the
    torch index), or when vLLM names no torch (set runtime_torch_spec then).
    """
    if isinstance(report, str):
        try:
            report = json.loads(report)
        except ValueError as exc:
            raise PipPlanError('the pip report is not JSON: %s' % exc) from exc
    installs = report.get('install') if isinstance(report, Mapping) else None
    if not isinstance(installs, list) or len(installs) != 1:
        raise PipPlanError('the pip report lists %s packages, expected exactly the vLLM (--no-deps)'
                           % (len(installs) if isinstance(installs, list) else 'no'))
    metadata = installs[0].get('metadata') or {}
    package = '%s %s' % (metadata.get('name', '?'), metadata.get('version', '?'))
    wanted = {canonical_name(name) for name in names}
    found = []
    for requirement in metadata.get('requires_dist') or []:
        match = _REQUIREMENT.fullmatch(requirement)
        if not match or canonical_name(match.group(1)) not in wanted:
            continue
        marker = match.group(4) or ''
        if re.search(r'\bextra\s*==', marker):
            continue
        if match.group(3).startswith('@'):
            raise PipPlanError('%s requires %r, a direct reference: torch comes from the torch index only'
                               % (package, requirement))
        found.append(requirement.strip())
    if not any(canonical_name(_REQUIREMENT.fullmatch(r).group(1)) == 'torch' for r in found):
        raise PipPlanError('%s names no torch requirement: set runtime_torch_spec to the torch it needs' % package)
    return found


def _without_index_options(pip_args: Sequence[str]) -> List[str]:
    """pip arguments without those that choose an index or a wheel directory."""
    out, skip = [], False
    for arg in pip_args:
        if skip:
            skip = False
            continue
        if arg in _INDEX_OPTIONS_WITH_VALUE:
            skip = True
            continue
        if arg in _INDEX_FLAGS or any(arg.startswith(opt + '=') for opt in _INDEX_OPTIONS_WITH_VALUE if opt.startswith('--')):
            continue
        out.append(arg)
    return out


def vllm_install_plan(venv: str, spec: str, pip_args: Optional[Sequence[str]] = None, torch_install: bool = True,
                      torch_index_url: str = '', torch_spec: str = '', report: str = '',
                      constraints: str = '') -> Dict[str, Any]:
    """Every argv of the venv's torch and vLLM install (see the module docstring for the order).

    ``venv`` is runtime_venv_dir, ``spec`` the vLLM requirement (``vllm==X``, ``git+https://...``, a wheel path),
    ``report`` the probe's stdout once it ran (empty before, and in check mode), ``constraints`` the constraints
    file's path on the node. Returns::

        {"probe": argv or [],      # runs when torch_install and no torch_spec
         "torch": argv or [],      # empty while the probe's report is not there yet (or torch_install is false)
         "torch_env": {...},       # environment of the torch step (pip's configured extra indexes emptied)
         "installed": argv or [],  # reads the torch the venv holds, as JSON
         "vllm": argv,
         "reinstall": argv or []}  # a local wheel of the same version replaced
    """
    pip_args = list(pip_args or [])
    pip = venv + '/bin/pip'
    plan: Dict[str, Any] = {'probe': [], 'torch': [], 'torch_env': {}, 'installed': [],
                            'vllm': [pip, 'install'] + pip_args + [spec],
                            'reinstall': ([pip, 'install', '--force-reinstall', '--no-deps'] + pip_args + [spec]
                                          if spec.startswith('/') else [])}
    if not torch_install:
        return plan
    if not torch_index_url:
        raise PipPlanError('runtime_torch_index_url is empty, expected the index of the CUDA torch builds')
    if torch_spec:
        torch_reqs = [torch_spec]
    else:
        plan['probe'] = ([pip, 'install', '--dry-run', '--no-deps', '--ignore-installed', '--quiet', '--report', '-']
                         + pip_args + [spec])
        torch_reqs = torch_requirements(report) if report.strip() else []
    if torch_reqs:
        plan['torch'] = [pip, 'install', '--index-url', torch_index_url] + _without_index_options(pip_args) + torch_reqs
    # An empty value in the environment overrides pip's configuration files (pip.conf extra-index-url, find-links).
    plan['torch_env'] = {'PIP_EXTRA_INDEX_URL': '', 'PIP_FIND_LINKS': ''}
    plan['installed'] = [venv + '/bin/python', '-c', _INSTALLED] + list(TORCH_INDEX_NAMES)
    plan['vllm'] = [pip, 'install'] + pip_args + ['--constraint', constraints, spec]
    return plan


def torch_constraints(installed: Union[str, Mapping[str, Optional[str]]]) -> str:
    """The constraints file pinning the torch the venv holds, exactly (local version label included).

    Input: the ``installed`` probe's JSON, ``{"torch": "2.9.0+cu130", "torchaudio": null, "torchvision": "0.24.0+cu130"}``.
    Returns ``"torch==2.9.0+cu130\\ntorchvision==0.24.0+cu130\\n"``. Raises PipPlanError when torch is not installed
    or a version is not a PEP 440 version.
    """
    if isinstance(installed, str):
        try:
            installed = json.loads(installed)
        except ValueError as exc:
            raise PipPlanError('the installed torch versions are not JSON: %s' % exc) from exc
    if not isinstance(installed, Mapping) or not installed.get('torch'):
        raise PipPlanError('the venv holds no torch after the torch step: %r' % (installed,))
    lines = []
    for name in sorted(installed):
        version = installed[name]
        if version is None:
            continue
        if not isinstance(version, str) or not _VERSION.fullmatch(version):
            raise PipPlanError('%s reads version %r, expected a PEP 440 version' % (name, version))
        lines.append('%s==%s\n' % (canonical_name(name), version))
    return ''.join(lines)
