# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers of the preflight role: paths that must agree across nodes, free disk for the checkpoint.

``value_disagreements`` takes what each node resolves for a set of variables::

    {"spark-head":   {"checkpoint_cache_dir": "/var/lib/dgxspark/huggingface/hub", "runtime_venv_dir": "/opt/dgxspark/vllm"},
     "spark-worker": {"checkpoint_cache_dir": "/data/hub",                         "runtime_venv_dir": "/opt/dgxspark/vllm"}}

and returns one message per variable whose value differs between nodes (or is
not an absolute path), naming the hosts and their values.
"""

from __future__ import annotations

import posixpath

GB = 1000 ** 3


def _show(value):
    return "%r" % (value,) if not isinstance(value, str) or value == "" or " " in value else value


def value_disagreements(values_by_host, names=None, allow_empty=()):
    """Messages for variables that do not resolve to the same absolute path on every host.

    ``names`` limits and orders the variables (default: every name any host has); ``allow_empty`` names the
    variables for which "" is allowed (it means "derived", e.g. runtime_hf_hub_cache).

    >>> value_disagreements({"a": {"x": "/p"}, "b": {"x": "/q"}})
    ['x differs between the nodes: a=/p, b=/q; the head and the workers must use the same path (set it once in group_vars/all, not per host)']
    """
    hosts = list(values_by_host)
    if names is None:
        seen = []
        for host in hosts:
            for name in values_by_host[host] or {}:
                if name not in seen:
                    seen.append(name)
        names = seen
    problems = []
    for name in names:
        values = [(host, (values_by_host[host] or {}).get(name)) for host in hosts]
        bad = [(h, v) for h, v in values
               if not isinstance(v, str) or (v == "" and name not in allow_empty) or (v and not v.startswith("/"))]
        if bad:
            problems.append("%s is not an absolute path on %s; expected an absolute path, the same on every node"
                            % (name, ", ".join("%s (%s)" % (h, _show(v)) for h, v in bad)))
            continue
        if len(set(v for _h, v in values)) > 1:
            problems.append("%s differs between the nodes: %s; the head and the workers must use the same path "
                            "(set it once in group_vars/all, not per host)"
                            % (name, ", ".join("%s=%s" % (h, _show(v)) for h, v in values)))
    return problems


def nearest_existing_dir(path, isdir=posixpath.isdir):
    """``path`` or its nearest parent that is a directory (``/`` at worst).

    >>> nearest_existing_dir("/var/lib/dgxspark/huggingface/hub", lambda p: p in ("/", "/var", "/var/lib"))
    '/var/lib'
    """
    current = posixpath.normpath(posixpath.join("/", path or "/"))
    while current != "/" and not isdir(current):
        current = posixpath.dirname(current)
    return current


def bytes_needed(min_free_gb, present_bytes):
    """Free bytes still needed for a checkpoint of ``min_free_gb`` GB (10^9 bytes) when ``present_bytes`` are there."""
    if not min_free_gb or min_free_gb <= 0:
        return 0
    return max(0, int(min_free_gb * GB) - int(present_bytes or 0))
