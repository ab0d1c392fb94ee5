"""Errors every qonnect component shares, in a module of their own so that any component can
raise them without importing the command line (``qonnect.cli``)."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input or environment: printed without a traceback."""
