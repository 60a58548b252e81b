# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DSpark recipe's container start-up and its switches, as filters (plugins/module_utils/dspark_recipe.py).

Each filter is documented in its sidecar file (``dspark_recipe_startup.yml``, ``dspark_recipe_env.yml``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

dspark_recipe = deferred.Module('dspark_recipe')


def dspark_recipe_startup(compose, checkout_dir):
    """The recipe's start-up script and the mounts it reads (see dspark_recipe.startup)."""
    try:
        return dspark_recipe.startup(compose, checkout_dir)
    except dspark_recipe.RecipeError as exc:
        raise AnsibleFilterError('dspark_recipe_startup: %s/docker-compose.dspark.yml: %s' % (checkout_dir, exc)) from exc


def dspark_recipe_env(variables):
    """The recipe's DSPARK_* environment from the runtime_dspark_* variables (see dspark_recipe.switch_env)."""
    try:
        return dspark_recipe.switch_env(variables)
    except dspark_recipe.RecipeError as exc:
        raise AnsibleFilterError('dspark_recipe_env: %s' % exc) from exc


class FilterModule(object):
    """DSpark recipe filters."""

    def filters(self):
        return {'dspark_recipe_startup': dspark_recipe_startup, 'dspark_recipe_env': dspark_recipe_env}
