# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils loaded at their first use, for the filter plugins.

ansible-core's filter loader imports every filter file of a collection in each worker process that templates any
of the collection's filters (2.19 plugins/loader.py, Jinja2Loader.get_with_context walks every module of
plugins/filter), and a worker lives for one task on one host, with no bytecode cache for collection code. A filter
file that imports its module_utils at the top makes each such task compile every module_utils any filter uses
(~65 ms of the controller's CPU per task, ~15 % of a preflight run's). Through these, a task compiles only what
the filters it calls need; the functions stay in module_utils (one source of truth) and the unit tests import them
as before.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib

_PACKAGE = 'ansible_collections.dgxspark.cluster.plugins.module_utils.'


class Module(object):
    """The module_utils module NAME, imported at the first attribute read."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(_PACKAGE + self._name), attr)


def function(module, name):
    """module_utils.MODULE.NAME, imported at the first call."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(_PACKAGE + module), name)(*args, **kwargs)
    call.__name__ = name
    call.__qualname__ = name
    call.deferred = (module, name)
    return call
