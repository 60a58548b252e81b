# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils.doctor import collective_argv, nccl_reason, report


class FilterModule(object):
    """doctor.yml's verdicts (plugins/module_utils/doctor.py)."""

    def filters(self):
        return {"doctor_report": report, "doctor_collective_argv": collective_argv,
                "doctor_nccl_reason": nccl_reason}
