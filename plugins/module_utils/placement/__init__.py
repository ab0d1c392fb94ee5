"""The placement engine: inventory model, hard-constraint filters, scorers, assignment.

``place(app, inventory, scorer="weighted")`` returns a :class:`Plan`;
``place_many(requests, inventory)`` places a batch of applications on one build of the fleet
(placement/batch.py) and returns a :class:`BatchResult`; scorers are ``weighted``
(default), ``borda`` (QONNECT's baseline) and ``optimal`` (HiGHS MILP). See
docs/architecture.md ("Plan") for the output format.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
    BatchResult,
    place_many,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import (
    capacity_violations,
    objective,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import (
    InventoryError,
    PlacementError,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory
from ansible_collections.qonnect.core.plugins.module_utils.placement.plan import Plan
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER, SCORERS

__all__ = [
    "DEFAULT_SCORER",
    "SCORERS",
    "BatchResult",
    "Inventory",
    "InventoryError",
    "PlacementError",
    "Plan",
    "capacity_violations",
    "objective",
    "place",
    "place_many",
]
