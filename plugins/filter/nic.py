# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """The nic role's node-to-node bandwidth plan, reboot-order decision and firmware comparison."""

    def filters(self):
        return {"nic_bandwidth_plan": deferred.function("fabric_health", "bandwidth_plan"),
                "nic_bandwidth_verdict": deferred.function("fabric_health", "bandwidth_verdict"),
                "nic_mtu_mismatches": deferred.function("fabric_health", "mtu_mismatches"),
                "nic_firmware_differences": deferred.function("firmware", "nic_differences")}
