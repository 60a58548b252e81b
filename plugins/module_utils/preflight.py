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
import re

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


def port_collisions(ports):
    """Ports that two of the collection's variables share, one message each.

    ``ports``: ``[[variable, port], ...]`` in the order the messages name them::

        >>> port_collisions([["runtime_vllm_port", 8888], ["runtime_vllm_master_port", 8888], ["nic_bandwidth_tcp_port", 18515]])
        ['runtime_vllm_port and runtime_vllm_master_port are both 8888']

    Every port the collection listens on or expects a service on is its own: two equal ones make the second
    listener fail with "Address already in use" after units were rewritten (or point a client at the wrong server).
    """
    seen = {}
    for name, port in ports or ():
        try:
            number = int(port)
        except (TypeError, ValueError):
            continue  # the type check names it
        seen.setdefault(number, []).append(str(name))
    return ["%s are both %d" % (" and ".join(names), number) for number, names in seen.items() if len(names) > 1]


# The reference grammar of distribution/reference (the one docker and containerd parse with): reference.go's grammar
# and regexp.go's patterns - name [":" tag] ["@" digest], a name at most 255 characters, lower-case path components.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = r"(?:%s(?:\.%s)*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?" % (_DOMAIN_COMPONENT, _DOMAIN_COMPONENT)
_PATH_COMPONENT = r"%s(?:%s%s)*" % (_ALNUM, _SEPARATOR, _ALNUM)
_NAME = r"(?:%s/)?%s(?:/%s)*" % (_DOMAIN, _PATH_COMPONENT, _PATH_COMPONENT)
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
# Go's \w is ASCII, and its $ never matches before a final newline: re.ASCII and fullmatch.
_REFERENCE_RE = re.compile(r"(%s)(?::(%s))?(?:@(%s))?" % (_NAME, _TAG, _DIGEST), re.ASCII)


def image_reference_problem(reference):
    """Why ``reference`` is no image reference docker would parse, or "" when it is one.

    >>> image_reference_problem("ghcr.io/anemll/dspark-vllm-gx10:0.1.1")
    ''
    >>> image_reference_problem("ghcr.io/Anemll/dspark-vllm-gx10:0.1.1")
    'repository name must be lowercase'
    """
    text = reference if isinstance(reference, str) else ""
    if not text:
        return "empty, expected name[:tag][@digest]"
    match = _REFERENCE_RE.fullmatch(text)
    if not match:
        if _REFERENCE_RE.fullmatch(text.lower()):
            return "repository name must be lowercase"
        return "invalid reference format, expected name[:tag][@digest] (lower-case name, a tag of word characters, " \
               ". and -, at most 128)"
    if len(match.group(1)) > 255:
        return "repository name must not be more than 255 characters"
    return ""
