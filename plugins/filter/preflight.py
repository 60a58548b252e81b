# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils.firmware import differences as firmware_differences
from ansible_collections.dgxspark.cluster.plugins.module_utils.preflight import (
    image_reference_problem, port_collisions, value_disagreements)


class FilterModule(object):
    """Preflight checks across nodes."""

    def filters(self):
        return {"value_disagreements": value_disagreements, "port_collisions": port_collisions,
                "image_reference_problem": image_reference_problem, "firmware_differences": firmware_differences}
