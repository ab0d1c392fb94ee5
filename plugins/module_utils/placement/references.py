# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster names a user gives in the plan options (``exclude``) checked against the clusters the
inventory knows: a typo would otherwise be accepted, stored as the application's policy, and the
user would believe a cluster drained that is not (issue 34.6).

The one check the placement and deploy modules (runners/placement.py) and ``qonnect plan`` call.
The controller's own runs skip it: their exclusions come from its decisions and from a policy
checked when it was stored, and a cluster deregistered since must not stop a heal.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError

MAX_KNOWN_SHOWN = 30  # names listed in the message; a federation of 1000 would drown it


class UnknownClusterError(QonnectError, ValueError):
    """Options name clusters the inventory does not know; ``errors`` names each, with its path."""

    summary = "unknown clusters"

    def __init__(self, errors: list[str], known: list[str]) -> None:
        self.errors = list(errors)
        self.known = list(known)
        self.hint = "known clusters: " + known_names(known)
        super().__init__(f"{self.summary}: " + "; ".join(self.errors) + f" ({self.hint})")


def known_names(known: list[str]) -> str:
    """The known names for a message, at most MAX_KNOWN_SHOWN of them."""
    if not known:
        return "none (the inventory has no clusters)"
    shown = ", ".join(known[:MAX_KNOWN_SHOWN])
    more = len(known) - MAX_KNOWN_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def cluster_names(inventory: Any) -> list[str]:
    """The names of an inventory's clusters (the KB's inventory dict, an Inventory, or names)."""
    clusters = getattr(inventory, "clusters", None)
    if clusters is None and isinstance(inventory, dict):
        clusters = inventory.get("clusters")
    if clusters is None:
        clusters = inventory
    names = []
    for c in clusters if isinstance(clusters, (list, tuple, set, frozenset)) else []:
        name = c.get("name") if isinstance(c, dict) else getattr(c, "name", c)
        if isinstance(name, str):
            names.append(name)
    return sorted(set(names))


def check_cluster_names(inventory: Any, **options: Iterable[str] | None) -> None:
    """UnknownClusterError listing every option entry that names no known cluster (all at once).

    ``options`` maps an option's name to the cluster names it holds, e.g. ``exclude=[...]``.
    """
    known = cluster_names(inventory)
    known_set = set(known)
    errors = []
    for option, names in sorted(options.items()):
        for i, name in enumerate(names or ()):
            if name in known_set:
                continue
            close = difflib.get_close_matches(str(name), known, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            errors.append(f"{option}[{i}]: {name!r} is not a known cluster{guess}")
    if errors:
        raise UnknownClusterError(errors, known)
