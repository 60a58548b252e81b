# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """Preflight checks across nodes."""

    def filters(self):
        return {"value_disagreements": deferred.function("preflight", "value_disagreements"),
                "port_collisions": deferred.function("preflight", "port_collisions"),
                "image_reference_problem": deferred.function("preflight", "image_reference_problem"),
                "firmware_differences": deferred.function("firmware", "differences")}
