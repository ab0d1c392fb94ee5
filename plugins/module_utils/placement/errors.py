"""Errors of the placement engine; both carry enough to tell the user what to change."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError


class InventoryError(QonnectError, ValueError):
    """The inventory dict is malformed; ``errors`` lists every problem with its path."""

    summary = "invalid inventory"

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid inventory:\n  " + "\n  ".join(self.errors))


class PlacementError(QonnectError, ValueError):
    """No plan exists: ``service`` cannot be placed because no cluster meets ``constraint``."""

    def __init__(self, service: str, constraint: str, detail: str = ""):
        self.service = service
        self.constraint = constraint
        self.detail = detail
        msg = f"service {service!r} cannot be placed: no cluster meets {constraint}"
        super().__init__(msg + (f" ({detail})" if detail else ""))
