# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node whose rank log shows the first error, and the ranks a hung head lost, as filters
(plugins/module_utils/vllm_logs.py).

Documented in their sidecar files ``service_first_error.yml``, ``service_error_lines.yml``, ``service_lost_ranks.yml``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

vllm_logs = deferred.Module('vllm_logs')


def service_first_error(reports):
    """The earliest error line across the nodes' logs (see vllm_logs.first_error)."""
    found = vllm_logs.first_error(reports)
    if found:
        found = dict(found, line=vllm_logs.strip_times([found['line']])[0])
    return found


def service_error_lines(lines):
    """The lines that are errors (vllm_logs.ERROR_RE), in order."""
    return [line for line in lines or [] if isinstance(line, str) and vllm_logs.ERROR_RE.search(line)]


def service_lost_ranks(reports, head):
    """The worker ranks the head's engine lost (see vllm_logs.lost_ranks)."""
    return vllm_logs.lost_ranks(reports, head)


class FilterModule(object):
    """Serving-unit log filters."""

    def filters(self):
        return {'service_first_error': service_first_error, 'service_error_lines': service_error_lines,
                'service_lost_ranks': service_lost_ranks}
