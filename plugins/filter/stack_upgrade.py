# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of upgrade.yml: what a node moves to and how it comes back.

The functions live in plugins/module_utils/stack_upgrade.py; each filter is documented in its own
sidecar file (upgrade_target.yml, simulated_changes.yml, set_changes.yml, restore_sources.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """dgxspark.cluster upgrade filters."""

    def filters(self):
        return {name: deferred.function("stack_upgrade", name)
                for name in ("upgrade_target", "simulated_changes", "set_changes", "restore_sources")}
