# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The changes of one placement as the KB's history records them (issue 34.5).

One home for "what moved": the deploy module (a user's deploy) and the controller (its runs)
both turn a placement before and after into rows ``{service, from, to}``.
"""

from __future__ import annotations


def clusters_of(placement: dict) -> dict[str, list[str]]:
    """service -> the sorted cluster names of a placement ``{service: [{cluster, ...}]}``."""
    return {svc: sorted({e["cluster"] for e in entries}) for svc, entries in (placement or {}).items()}


def moves(previous: dict, placement: dict, every: bool) -> list[dict]:
    """History changes {service, from, to}: the services whose clusters changed (``every``: all
    of them, e.g. when a new version replaced what runs, or a change failed)."""
    before, after = clusters_of(previous), clusters_of(placement)
    return [
        {"service": svc, "from": before.get(svc, []), "to": after.get(svc, [])}
        for svc in sorted(set(before) | set(after))
        if every or before.get(svc, []) != after.get(svc, [])
    ]


def describe(changes: list[dict]) -> str:
    """Changes in a sentence for an event: 'ratings: edge-1 -> edge-2; web: - -> cloud-1'."""
    return "; ".join(
        f"{c['service']}: {', '.join(c['from']) or '-'} -> {', '.join(c['to']) or '-'}" for c in changes
    )
