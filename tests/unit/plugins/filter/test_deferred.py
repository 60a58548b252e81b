"""The filter plugins load their module_utils at the first call (plugins/module_utils/deferred.py): ansible-core imports
every filter file of the collection in each worker that templates one of its filters."""

import importlib
import pkgutil
import subprocess
import sys

import pytest

from ansible_collections.dgxspark.cluster.plugins import filter as filter_pkg
from ansible_collections.dgxspark.cluster.plugins.module_utils import deferred
from ansible_collections.dgxspark.cluster.plugins.module_utils import nvidia_stack

FILTER_FILES = [name for _finder, name, _pkg in pkgutil.iter_modules(filter_pkg.__path__)]
MODULE_UTILS = "ansible_collections.dgxspark.cluster.plugins.module_utils."


def test_importing_every_filter_file_loads_no_module_utils_but_deferred():
    """What a worker pays when it first templates a dgxspark filter: every filter file, and no parser."""
    code = (
        "import importlib, sys\n"
        "for name in %r:\n"
        "    importlib.import_module('ansible_collections.dgxspark.cluster.plugins.filter.' + name)\n"
        "print(sorted(m for m in sys.modules if m.startswith(%r)))\n" % (FILTER_FILES, MODULE_UTILS))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=dict(__import__("os").environ, PYTHONPATH=":".join(sys.path))).stdout
    assert eval(out) == [MODULE_UTILS + "deferred"], out  # pylint: disable=eval-used


@pytest.mark.parametrize("name", FILTER_FILES)
def test_every_filter_resolves_to_a_callable(name):
    filters = importlib.import_module("ansible_collections.dgxspark.cluster.plugins.filter." + name).FilterModule().filters()
    assert filters, name
    for filter_name, func in filters.items():
        assert callable(func), filter_name
        target = getattr(func, "deferred", None)
        if target:  # the named function exists in its module_utils file
            assert callable(getattr(importlib.import_module(MODULE_UTILS + target[0]), target[1])), (filter_name, target)


def test_a_deferred_function_returns_and_raises_what_its_target_does():
    func = deferred.function("nvidia_stack", "proc_driver_version")
    text = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  (dvs-builder@U22)\n"
    assert func(text) == nvidia_stack.proc_driver_version(text)
    assert func.__name__ == "proc_driver_version"
    with pytest.raises(TypeError):
        func()


def test_a_deferred_module_reads_its_attributes_at_first_use():
    module = deferred.Module("nvidia_stack")
    assert module.proc_driver_version is nvidia_stack.proc_driver_version
    with pytest.raises(AttributeError):
        module.no_such_function  # pylint: disable=pointless-statement
