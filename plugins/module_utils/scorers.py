# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scorer registry: every name a user may pick (module option, CLI, controller) and the
module that implements it. Light on purpose (no numpy): argument specs import the names."""

from __future__ import annotations

import importlib
from typing import Any, Callable

# name -> module under placement/ whose assign(problem) returns (assignment, explanation)
SCORERS = ("weighted", "borda", "optimal")
DEFAULT_SCORER = "weighted"
_PACKAGE = "ansible_collections.qonnect.core.plugins.module_utils.placement"


def assign_function(name: str) -> Callable[[Any], tuple[dict, dict]]:
    """The ``assign`` of scorer ``name``; ValueError naming the choices for anything else."""
    if name not in SCORERS:
        raise ValueError(f"scorer: {name!r} is not one of {', '.join(sorted(SCORERS))}")
    return importlib.import_module(f"{_PACKAGE}.{name}").assign
