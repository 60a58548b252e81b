# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM serve command, its environment and the node topology, as filters.

One filter per function of ``plugins/module_utils/vllm_cmd.py`` (the single
source of truth, unit-tested). Each filter is documented in its sidecar file
(``vllm_serve_argv.yml``, ``vllm_serve_warnings.yml``, ``vllm_serve_env.yml``,
``vllm_topology.yml``, ``vllm_api_problems.yml``, ``vllm_api_layout.yml``), so ``ansible-doc -t filter dgxspark.cluster.<name>``
shows it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

vllm_cmd = deferred.Module('vllm_cmd')


def _wrap(func):
    def filter_func(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except vllm_cmd.VllmConfigError as exc:
            raise AnsibleFilterError('%s: %s' % (func.__name__, exc)) from exc
    filter_func.__name__ = func.__name__
    filter_func.__doc__ = func.__doc__
    return filter_func


def vllm_serve_argv(knobs, role=None, node_rank=None, nnodes=None, master_addr=None, command=None, topology=None,
                    runtime_kind='container'):
    """argv of vllm serve for one node (see vllm_cmd.serve_argv)."""
    return vllm_cmd.serve_argv(knobs, role=role, node_rank=node_rank, nnodes=nnodes, master_addr=master_addr,
                               command=command, topology=topology, runtime_kind=runtime_kind)


def vllm_serve_warnings(knobs, runtime_kind='container'):
    """Settings that cost speed or safety (see vllm_cmd.serve_warnings)."""
    return vllm_cmd.serve_warnings(knobs, runtime_kind=runtime_kind)


def vllm_serve_env(knobs, runtime_kind='container', cache_dir=None):
    """Static, non-secret environment of vllm serve, with the node's JIT cache paths under cache_dir (see vllm_cmd.serve_env)."""
    return vllm_cmd.serve_env(knobs, runtime_kind=runtime_kind, cache_dir=cache_dir)


def vllm_api_problems(knobs):
    """The API binds beyond loopback without a key (see vllm_cmd.api_problems)."""
    return vllm_cmd.api_problems(knobs)


def vllm_api_layout(knobs):
    """Where vLLM listens and whether the API proxy fronts it (see vllm_cmd.api_layout)."""
    return vllm_cmd.api_layout(knobs)


def vllm_layout_problems(knobs, nnodes, runtime_kind='container'):
    """Why the parallel layout cannot serve the model on nnodes nodes (see vllm_cmd.layout_problems)."""
    return vllm_cmd.layout_problems(knobs, nnodes, runtime_kind=runtime_kind)


def vllm_topology(cluster, host):
    """A host's role, node rank, node count and the master address, from preflight_topology (see vllm_cmd.topology)."""
    return vllm_cmd.topology(cluster, host)


class FilterModule(object):
    """vLLM serve command filters."""

    def filters(self):
        return {
            'vllm_serve_argv': _wrap(vllm_serve_argv),
            'vllm_serve_warnings': _wrap(vllm_serve_warnings),
            'vllm_serve_env': _wrap(vllm_serve_env),
            'vllm_topology': _wrap(vllm_topology),
            'vllm_api_problems': _wrap(vllm_api_problems),
            'vllm_api_layout': _wrap(vllm_api_layout),
            'vllm_layout_problems': _wrap(vllm_layout_problems),
        }
