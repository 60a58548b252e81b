"""What the real stack reads from the environment at start, checked the way it fails.

* ``nccl_warnings``: NCCL_IB_HCA set with NCCL_IB_GID_INDEX empty (NCCL >= 2.21
  reads "" as unset and selects the GID itself: the first RoCE v2 IPv4 GID of
  each port, not necessarily the fabric address; see nccl.py) or unset without
  NCCL_IB_ADDR_FAMILY (nothing pins the index), or not a plain integer (NCCL's
  strtoll reads "three" as 0).
* ``hf_cache_problem``: with HF_HUB_OFFLINE=1 the model must be in the HF cache
  (huggingface_hub's LocalEntryNotFoundError otherwise). Simple on purpose:
  ``models--ORG--NAME/snapshots/<sha>/config.json`` must exist, the sha being
  the revision when it is a commit, else the content of ``refs/<revision>``
  (read as is, like huggingface_hub: a trailing newline breaks it).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from .nccl import c_strtoll

_TRUE = {'1', 'ON', 'YES', 'TRUE'}
_SHA_RE = re.compile(r'^[0-9a-f]{40}$')


def env_true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, '').strip().upper() in _TRUE


def nccl_warnings(env: Mapping[str, str]) -> list[str]:
    """Warnings about the NCCL RoCE environment (empty when fine)."""
    hca = env.get('NCCL_IB_HCA', '').strip()
    if not hca:
        return []
    if 'NCCL_IB_GID_INDEX' in env and not env['NCCL_IB_GID_INDEX'].strip():
        return ['NCCL_IB_GID_INDEX is set but empty while NCCL_IB_HCA=%s: NCCL reads an empty value as unset and selects '
                'the GID itself (the first RoCE v2 IPv4 GID of each port), which need not carry this node\'s fabric address '
                'and may differ per node. Pin the RoCE v2 index of this node (show_gids).' % hca]
    if 'NCCL_IB_GID_INDEX' not in env and not env.get('NCCL_IB_ADDR_FAMILY', '').strip():
        return ['NCCL_IB_GID_INDEX is unset while NCCL_IB_HCA=%s and NCCL_IB_ADDR_FAMILY is not set: nothing pins the RoCE v2 '
                'GID index of this node (it differs per node and drifts across reboots). Pin it (show_gids) or set '
                'NCCL_IB_ADDR_FAMILY=AF_INET so NCCL >= 2.21 selects it.' % hca]
    value = env.get('NCCL_IB_GID_INDEX', '')
    if value and not re.match(r'^-?\d+$', value):
        return ['NCCL_IB_GID_INDEX is %r, expected an integer (the RoCE v2 GID index of this node); NCCL reads it with '
                'strtoll as %d' % (value, c_strtoll(value)[0])]
    return []


def hub_cache(env: Mapping[str, str]) -> str:
    """The hub cache directory huggingface_hub would use."""
    for name in ('HF_HUB_CACHE', 'HUGGINGFACE_HUB_CACHE'):
        if env.get(name):
            return os.path.expanduser(env[name])
    if env.get('HF_HOME'):
        return os.path.join(os.path.expanduser(env['HF_HOME']), 'hub')
    xdg = env.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(xdg, 'huggingface', 'hub')


def local_model_problem(model: str) -> Optional[str]:
    """A model given as a path must be a checkpoint directory (config.json)."""
    if not os.path.isdir(model):
        return ('model path %s does not exist or is not a directory (a repo id looks like org/name; a local checkpoint must be '
                'a directory with config.json)' % model)
    if not os.path.isfile(os.path.join(model, 'config.json')):
        return 'model directory %s has no config.json (or it is a dangling link)' % model
    return None


def is_path(model: str) -> bool:
    return model.startswith(('/', './', '../', '~')) or os.path.isdir(model)


def hf_cache_problem(model: str, revision: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """Why ``model``@``revision`` is not servable from the HF cache, or None."""
    if is_path(model):
        return local_model_problem(os.path.expanduser(model))
    cache = hub_cache(env)
    repo_dir = os.path.join(cache, 'models--' + model.replace('/', '--'))
    if not os.path.isdir(repo_dir):
        return 'no cache folder for %s: %s does not exist' % (model, repo_dir)
    revision = revision or 'main'
    if _SHA_RE.match(revision):
        commit = revision
    else:
        ref = os.path.join(repo_dir, 'refs', revision)
        if not os.path.isfile(ref):
            return ('revision %s of %s is not a commit and %s does not exist (a revision-pinned download does not write refs; '
                    'pass the commit as --revision)' % (revision, model, ref))
        with open(ref, encoding='utf-8') as f:
            commit = f.read()  # as huggingface_hub reads it: not stripped
    snapshot = os.path.join(repo_dir, 'snapshots', commit)
    if not os.path.isdir(snapshot):
        hint = ' (refs/%s ends with a newline: write exactly the 40-character sha)' % revision if commit != commit.strip() else ''
        return 'no snapshot %r of %s in %s%s' % (commit, model, os.path.join(repo_dir, 'snapshots'), hint)
    if not os.path.isfile(os.path.join(snapshot, 'config.json')):
        return 'snapshot %s has no config.json (incomplete download, or a dangling link into a blob store that was not copied)' % snapshot
    return None
