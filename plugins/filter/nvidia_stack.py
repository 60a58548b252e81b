# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over what a node shows of its NVIDIA driver and CUDA toolkits.

The parsers live in plugins/module_utils/nvidia_stack.py; each filter is
documented in its own sidecar file (driver_state.yml, proc_driver_version.yml,
nvcc_release.yml, apt_simulation.yml, module_builds.yml, driver_target.yml,
kernel_set.yml, kernel_offer.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred


class FilterModule(object):
    """dgxspark.cluster NVIDIA driver / CUDA filters."""

    def filters(self):
        return {name: deferred.function("nvidia_stack", name)
                for name in ("driver_state", "proc_driver_version", "nvcc_release", "apt_simulation", "module_builds",
                             "driver_target", "kernel_set", "kernel_offer")}
