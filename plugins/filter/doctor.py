# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """doctor.yml's verdicts (plugins/module_utils/doctor.py)."""

    def filters(self):
        return {"doctor_report": deferred.function("doctor", "report"),
                "doctor_collective_argv": deferred.function("doctor", "collective_argv"),
                "doctor_nccl_reason": deferred.function("doctor", "nccl_reason")}
