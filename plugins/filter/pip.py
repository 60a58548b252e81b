# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection pip-installs on the nodes and how, as filters.

One filter per function of ``plugins/module_utils/pip_plan.py`` (the single source of truth, unit-tested),
each documented in its sidecar file (``pip_lock_pins.yml``, ``pip_vllm_plan.yml``, ``pip_torch_constraints.yml``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

pip_plan = deferred.Module('pip_plan')


def _wrap(func):
    def filter_func(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except pip_plan.PipPlanError as exc:
            raise AnsibleFilterError('%s: %s' % (func.__name__, exc)) from exc
    filter_func.__name__ = func.__name__
    filter_func.__doc__ = func.__doc__
    return filter_func


def pip_lock_pins(text):
    """{name: version} of a hash-locked requirements file (see pip_plan.lock_pins)."""
    return pip_plan.lock_pins(text)


def pip_vllm_plan(venv, spec, pip_args=None, torch_install=True, torch_index_url='', torch_spec='', report='',
                  constraints=''):
    """Every argv of the venv's torch and vLLM install (see pip_plan.vllm_install_plan)."""
    return pip_plan.vllm_install_plan(venv, spec, pip_args=pip_args, torch_install=torch_install,
                                      torch_index_url=torch_index_url, torch_spec=torch_spec, report=report,
                                      constraints=constraints)


def pip_torch_constraints(installed):
    """The constraints file pinning the installed torch exactly (see pip_plan.torch_constraints)."""
    return pip_plan.torch_constraints(installed)


class FilterModule(object):
    """pip install filters."""

    def filters(self):
        return {
            'pip_lock_pins': _wrap(pip_lock_pins),
            'pip_vllm_plan': _wrap(pip_vllm_plan),
            'pip_torch_constraints': _wrap(pip_torch_constraints),
        }
