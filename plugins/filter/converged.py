# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxspark.cluster.plugins.module_utils.converged import content_digest


def _content_digest(root):
    if not isinstance(root, str) or not root:
        raise AnsibleFilterError("content_digest wants the collection's root directory, got %r" % (root,))
    return content_digest(root)


class FilterModule(object):
    """site.yml's fast path (module_utils/converged.py)."""

    def filters(self):
        return {"content_digest": _content_digest}
