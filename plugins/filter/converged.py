# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred

converged = deferred.Module('converged')


def _content_digest(root):
    if not isinstance(root, str) or not root:
        raise AnsibleFilterError("content_digest wants the collection's root directory, got %r" % (root,))
    return converged.content_digest(root)


def _site_input_names(names):
    if not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("site_input_names wants a list of variable names, got %r" % (names,))
    return converged.site_input_names(names)


def _complete_run(run_tags, skip_tags, roles, check_mode=False):
    for label, value in (("ansible_run_tags", run_tags), ("ansible_skip_tags", skip_tags), ("roles", roles)):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError("complete_run wants %s as a list, got %r" % (label, value))
    return converged.complete_run(list(run_tags), list(skip_tags), list(roles), bool(check_mode))


class FilterModule(object):
    """site.yml's fast path (module_utils/converged.py)."""

    def filters(self):
        return {"content_digest": _content_digest, "site_input_names": _site_input_names,
                "complete_run": _complete_run}
