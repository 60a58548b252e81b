# -*- coding: utf-8 -*-
"""What the module unit tests share: exit_json / fail_json turned into exceptions the test can catch."""

from __future__ import annotations


class ExitJson(Exception):
    """The module called exit_json; args[0] is its result."""


class FailJson(Exception):
    """The module called fail_json; args[0] is its result, with msg and failed=True."""


def exit_json(self, **kwargs):  # pylint: disable=unused-argument
    raise ExitJson(kwargs)


def fail_json(self, msg, **kwargs):  # pylint: disable=unused-argument
    kwargs["msg"] = msg
    kwargs["failed"] = True
    raise FailJson(kwargs)
