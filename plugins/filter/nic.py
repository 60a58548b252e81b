# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils.fabric_health import bandwidth_plan, bandwidth_verdict, mtu_mismatches
from ansible_collections.dgxspark.cluster.plugins.module_utils.firmware import nic_differences


class FilterModule(object):
    """The nic role's node-to-node bandwidth plan, reboot-order decision and firmware comparison."""

    def filters(self):
        return {"nic_bandwidth_plan": bandwidth_plan, "nic_bandwidth_verdict": bandwidth_verdict,
                "nic_mtu_mismatches": mtu_mismatches,
                "nic_firmware_differences": nic_differences}
