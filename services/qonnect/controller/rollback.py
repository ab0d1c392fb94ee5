"""Which version a failing one rolls back to (issue 22.4).

A spec version that failed on ``--max-version-failures`` clusters is not moved again: the leader
stores an older version's spec again as the newest version (the KB's fenced rollback, which can
only restore what a user stored) and places it like any new version. The version restored is the
newest one before the failing version that no rollback replaced and whose spec differs from the
failing one. A version a rollback stored is never rolled back itself: one automatic rollback per
failing deploy, then only the report, so a fault that is not the version's (every cluster
crash-loops anything) cannot make the controller walk back through the history.

Pure over the KB's version list, so each rule is unit-testable.
"""

from __future__ import annotations

from typing import Any


def restore_target(versions: list[dict[str, Any]], failing: int | None) -> tuple[int | None, str]:
    """(the version to restore or None, why), from ``GET /applications/NAME/versions``."""
    by_version = {int(v["version"]): v for v in versions if isinstance(v.get("version"), int)}
    current = by_version.get(failing) if failing is not None else None
    if current is None or failing is None:
        return None, f"version {failing} is not in the KB's history"
    made_by = current.get("rollback")
    if made_by:
        return None, (
            f"version {failing} was itself stored by a rollback (of version {made_by.get('failing')} "
            f"to version {made_by.get('restores')}'s spec); one automatic rollback per failing deploy"
        )
    replaced = {int(v["rollback"]["failing"]) for v in by_version.values() if v.get("rollback")}
    for version in sorted((v for v in by_version if v < failing), reverse=True):
        record = by_version[version]
        if version in replaced or record.get("application") == current.get("application"):
            continue
        return version, f"version {version}, the newest before {failing} that did not fail"
    return None, f"no version before {failing} that did not fail to roll back to"
