# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The placement module's runner, and the one way a module asks the engine for a plan (the
application module checks a spec places, deploy computes the plan it applies).

Also the one way ``qonnect plan --fail``, ``qonnect survivability`` and the module's
``simulate_failures`` / ``survivability`` read a fleet for what-if failures
(placement/whatif.py): the stored applications with their policies, the given specs on top,
and the failed clusters chosen by name and by label, every problem reported at once.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_app_from_params
from ansible_collections.qonnect.core.plugins.module_utils.args_common import PLAN_ARGSPEC
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError, QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule
from ansible_collections.qonnect.core.plugins.module_utils.placement import place
from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import place_batch, policy_item
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import (
    UnknownClusterError,
    check_cluster_names,
    known_names,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.whatif import (
    Tenant,
    WhatIf,
    survivability,
    tenants_from_kb,
)
from ansible_collections.qonnect.core.plugins.module_utils.runners.survive import with_planned

# The plan options as a user who sets none gets them.
PLAN_DEFAULTS: dict[str, Any] = {name: opts["default"] for name, opts in PLAN_ARGSPEC.items()}


def check_options(inventory: Any, params: dict[str, Any]) -> None:
    """The plan options' cluster names must be the inventory's (a typo in ``exclude`` is an
    error, not a stored policy that excludes nothing). A controller's fenced run is not checked:
    its exclusions are its own decisions' (placement/references.py)."""
    if not params.get("fencing"):
        check_cluster_names(inventory, exclude=params.get("exclude"))


def compute_plan(app: Any, inventory: dict, params: dict[str, Any], explain: bool = True) -> dict:
    """Run the engine with the plan options (PLAN_ARGSPEC); the current placement drives hysteresis."""
    check_options(inventory, params)
    current = (inventory.get("placements") or {}).get(app.name)
    plan = place(
        app,
        inventory,
        scorer=params["scorer"],
        exclude=tuple(params.get("exclude") or ()),
        current=current,
        hysteresis=params["hysteresis"],
        explain=explain,
    )
    return plan.to_dict()


class FailureChoiceError(QonnectError, ValueError):
    """The failures asked for name clusters the inventory does not know, or labels no cluster
    has; ``errors`` names each, with the option it came from."""

    summary = "cannot simulate these failures"

    def __init__(self, errors: list[str], hint: str = "") -> None:
        self.errors = list(errors)
        self.hint = hint
        super().__init__(f"{self.summary}: " + "; ".join(self.errors) + (f" ({hint})" if hint else ""))


class NotPlacedError(QonnectError, ValueError):
    """Given applications the inventory holds no placement for cannot be placed now, so their
    failures cannot be simulated; ``errors`` says why, per application."""

    summary = "cannot be placed now, so no failure of theirs can be simulated"

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__(f"{self.summary}: " + "; ".join(self.errors))


def whatif_fleet(inventory: dict, stored: list, given: list) -> tuple[Any, list[str]]:
    """A :class:`whatif.WhatIf` of the fleet and the notes a reader should see.

    ``stored``: the tenants the KB holds (whatif.tenants_from_kb, each with its stored policy);
    ``given``: tenants from spec files, which replace a stored application of the same name. A
    given application the inventory holds no placement for is first placed as a deploy would
    place it now (all of them in one batch, by name, each with its policy) and its replicas
    take their capacity, so the failures are judged against where it would run.
    NotPlacedError when one of them cannot be placed at all.
    """
    tenants = {t.name: t for t in stored}
    notes = []
    for t in given:
        if t.name in tenants:
            notes.append(f"{t.name}: planned from the given spec, not the stored one")
        tenants[t.name] = t
    placements = inventory.get("placements") or {}
    new = sorted((t for t in given if not placements.get(t.name)), key=lambda t: t.name)
    if new:
        inventory = deployed(inventory, new)
        for t in new:
            where = ", ".join(
                f"{svc} {'+'.join(e['cluster'] for e in entries)}"
                for svc, entries in inventory["placements"][t.name].items()
            )
            notes.append(
                f"{t.name}: not placed in the inventory; placed first as a deploy would now ({where})"
            )
    return WhatIf(inventory, list(tenants.values())), notes


def deployed(inventory: dict, tenants: list) -> dict:
    """A copy of ``inventory`` with ``tenants`` placed as one deploy batch: their plans in
    ``placements`` and their replicas' requests added to the nodes they land on."""
    items = [policy_item(t.app, t.scorer, t.hysteresis, t.exclude, DEFAULT_POLICY) for t in tenants]
    result = place_batch(items, inventory)
    if result.errors:
        raise NotPlacedError([f"{name}: {err}" for name, err in sorted(result.errors.items())])
    out = inventory
    for t in tenants:
        out = with_planned(out, t.app, result.plans[t.name].to_dict()["services"])
    return out


# the controller's policy for an application deployed without one (controller/replan.py)
DEFAULT_POLICY = ("weighted", 0.1)


def failed_clusters(
    whatif: Any,
    clusters: list[str] | None = None,
    labels: list[tuple[str, str]] | None = None,
    options: tuple[str, str] = ("clusters", "labels"),
) -> tuple[list[str], str]:
    """(the clusters to fail, a name for the scenario): the clusters named and every cluster
    matching one of the ``(key, value)`` labels. FailureChoiceError naming every unknown
    cluster and every label that matches no cluster, at once (``options``: how the
    messages name the cluster and the label option)."""
    clusters, labels = list(clusters or []), list(labels or [])
    errors: list[str] = []
    try:
        check_cluster_names(whatif.inventory, **{options[0]: clusters})
    except UnknownClusterError as exc:
        errors += exc.errors
    failed = set(clusters)
    for i, (key, value) in enumerate(labels):
        found = whatif.matching(key, value)
        if not found:
            have = whatif.label_values(key)
            why = f"values in the fleet: {', '.join(have)}" if have else f"no cluster has the label {key!r}"
            errors.append(f"{options[1]}[{i}]: no cluster has {key}={value} ({why})")
        failed.update(found)
    if errors:
        hint = (
            "known clusters: " + known_names(whatif.cluster_names)
            if any("known cluster" in e for e in errors)
            else ""
        )
        raise FailureChoiceError(errors, hint)
    if not failed:
        raise InputError(options[0], "name at least one cluster or label to fail")
    parts = [f"cluster {', '.join(clusters)}"] if clusters else []
    parts += [f"{k}={v}" for k, v in labels]
    return sorted(failed), " + ".join(parts)


def run(module: QonnectModule) -> dict:
    """Plan the application on the KB's inventory, or on a given one (what-if planning); with
    ``simulate_failures`` or ``survivability``, also what the fleet's heal would do if clusters
    failed now (all of the fleet's applications, the given one too)."""
    params = module.params
    given_inventory = params.get("inventory")
    simulate = params.get("simulate_failures")
    report = params.get("survivability")
    source = any(params.get(k) for k in ("name", "spec", "src"))
    if not source and simulate is None and not report:
        raise InputError(
            "name", "one of name, spec or src is required (unless simulate_failures or survivability)"
        )
    app = None
    if source:
        kb = module.kb if params.get("name") or given_inventory is None else None
        app = load_app_from_params(params, kb)
    result: dict[str, Any] = {"changed": False}
    if simulate is None and not report:
        inventory = given_inventory if given_inventory is not None else module.kb.inventory()
        result["plan"] = compute_plan(app, inventory, params, params["explain"])
        return result
    stored: list[Tenant] = []
    problems: dict[str, str] = {}
    if given_inventory is not None:
        inventory = given_inventory
    else:
        inventory, stored, problems = tenants_from_kb(module.kb)
    given = []
    if app is not None:
        result["plan"] = compute_plan(app, inventory, params, params["explain"])
        # a stored application keeps its stored policy; a given spec is planned with the options
        if params.get("spec") or params.get("src") or given_inventory is not None:
            given.append(given_tenant(app, params))
    whatif, notes = whatif_fleet(inventory, stored, given)
    warnings = notes + [f"{name} not simulated: {why}" for name, why in sorted(problems.items())]
    if simulate is not None:
        labels = simulate.get("labels") or {}
        failed, name = failed_clusters(
            whatif,
            simulate.get("clusters") or [],
            sorted((str(k), str(v)) for k, v in labels.items()),
            ("simulate_failures.clusters", "simulate_failures.labels"),
        )
        result["simulation"] = whatif.fail(failed, name=name, explain=params.get("explain", True)).to_dict()
    if report:
        result["survivability"] = survivability(whatif, params.get("survivability_labels") or ()).to_dict()
    if warnings:
        result["warnings"] = warnings
    return result


def given_tenant(app: Any, params: dict[str, Any]) -> Any:
    """A given application as a tenant with the plan options as its policy."""
    return Tenant(app, params.get("scorer"), params.get("hysteresis"), tuple(params.get("exclude") or ()))
