"""The testbed's own error type, so that it imports nothing of the product it tests."""

from __future__ import annotations


class TestbedError(Exception):
    """An error of the user's input or environment: the CLI prints it without a traceback."""

    __test__ = False  # not a pytest test class despite its name
