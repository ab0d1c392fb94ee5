# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``require_survivable`` of the deploy module (issue 37): would the fleet, with this application
placed as planned, still be N-1 survivable?

"Placed as planned" is :func:`with_planned`: the planned placement replaces the application's
entry in the inventory's placements, and its replicas' requests are added to the requested
capacity of the nodes they are planned on (and, for an application already running, the
replicas of the version stored now are taken off the nodes they run on). The report is
placement/whatif.py's, over every stored application with the policy it was deployed with (read
as the controller reads it) and this one with the policy of this deploy.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import RESOURCES

SHOWN = 5  # violations named in the message (all of them are in the error's list)


class NotSurvivable(QonnectError):
    """The deploy would leave the fleet not survivable: nothing was changed."""

    summary = "refused by require_survivable: with this deploy the fleet would not be survivable"

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(self.summary)


def _requests(service: Any) -> dict[str, float]:
    req = getattr(service, "requests", None) or {}
    return {r: float(req.get(r, 0) or 0) for r in RESOURCES}


def _charge(inventory: dict, app: Any, placement: dict, sign: float) -> None:
    """Add (sign 1) or take off (sign -1) the requests of ``app``'s replicas on the nodes of
    ``placement`` (an entry without nodes: on its cluster's first node). Nodes are found by
    cluster and name: two clusters may both have a ``worker-1``."""
    clusters = {c.get("name"): c.get("nodes") or [] for c in inventory.get("clusters") or []}
    for service in app.services:
        req = _requests(service)
        for entry in placement.get(service.name) or []:
            if not isinstance(entry, dict):
                continue
            nodes = clusters.get(entry.get("cluster")) or []
            by_name = {n.get("name"): n for n in nodes}
            names = list(entry.get("nodes") or [])
            replicas = int(entry.get("replicas", 1) or 1)
            targets = [by_name.get(n) for n in names] if names else [nodes[0] if nodes else None] * replicas
            for target in targets:
                if target is None:
                    continue
                used = target.setdefault("requested", {})
                for r, v in req.items():
                    used[r] = max(0.0, float(used.get(r, 0) or 0) + sign * v)


def with_planned(inventory: dict, app: Any, planned: dict, old_app: Any = None) -> dict:
    """A copy of ``inventory`` with ``app`` placed as ``planned`` ({service: [{cluster,
    replicas, nodes}]}): its placement replaced, its replicas' requests added to the nodes, and
    those of ``old_app`` (the version running now, if any) taken off the nodes it runs on."""
    out = copy.deepcopy(inventory)
    placements = out.setdefault("placements", {})
    running = placements.get(app.name) or {}
    if old_app is not None and running:
        _charge(out, old_app, running, -1.0)
    _charge(out, app, planned, 1.0)
    placements[app.name] = copy.deepcopy(planned)
    return out


def check(kb: Any, app: Any, planned: dict, policy: dict, inventory: dict | None = None) -> dict:
    """The survivability report (whatif.Report.to_dict()) of the fleet with ``app`` placed as
    ``planned`` and deployed with ``policy``. Raises NotSurvivable naming each scenario,
    application and shortfall the deploy makes fail: a failure the fleet already had without
    this deploy is not this deploy's doing (the report lists it; it refuses nothing).
    KBError propagates."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import whatif

    inventory = kb.inventory() if inventory is None else inventory
    _inv, tenants, _problems = whatif.tenants_from_kb(_Fixed(kb, inventory))
    old = next((t for t in tenants if t.name == app.name), None)
    others = [t for t in tenants if t.name != app.name]
    new = whatif.Tenant(
        app, policy.get("scorer"), policy.get("hysteresis"), tuple(policy.get("exclude") or ())
    )
    fleet = whatif.WhatIf(with_planned(inventory, app, planned, old.app if old else None), [*others, new])
    report = whatif.survivability(fleet)
    if report.survivable:
        return report.to_dict()
    before = whatif.survivability(whatif.WhatIf(inventory, tenants)) if tenants else None
    had = set(violations(before)) if before is not None else set()
    caused = [line for key, line in violations(report).items() if key not in had]
    if caused:
        raise NotSurvivable(caused)
    return report.to_dict()


def violations(report: Any) -> dict[tuple[str, str], str]:
    """(application, scenario) -> '<app>: if <scenario> fails: <shortfall>', per failure an
    application states it must survive and would not."""
    scenarios = {s.name: s for s in report.scenarios}
    out = {}
    for name, verdict in sorted(report.applications.items()):
        for v in verdict["violations"]:
            outcome = scenarios[v["scenario"]].outcomes.get(name) if v["scenario"] in scenarios else None
            why = outcome.shortfall.text() if outcome is not None and outcome.shortfall else v["reason"]
            out[(name, v["scenario"])] = f"{name}: if {v['scenario']} fails: {why}"
    return out


class _Fixed:
    """The KB with the inventory already read (tenants_from_kb reads it once more otherwise)."""

    def __init__(self, kb: Any, inventory: dict) -> None:
        self._kb, self._inventory = kb, inventory

    def inventory(self) -> dict:
        return self._inventory

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kb, name)
