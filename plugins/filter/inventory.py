# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """Inventory checks."""

    def filters(self):
        return {name: deferred.function("inventory", name) for name in ("inventory_problems", "spec_problems", "roles_spec_problems", "unknown_variables")}
