# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several applications deployed in one run: the deploy module's ``applications`` (issue 38.6).

Why: a playbook that deploys many applications with a ``loop`` starts one module process per
application, reads the fleet once each, and plans each alone against a fleet the others have
not taken yet. Here every spec is read and validated first (every problem of every item at
once, nothing changed), the fleet is read once and all applications are planned in one pass of
the placement engine, each with its own policy and against the capacity the earlier ones took;
then each is deployed by the same runner as a single deploy (its intent, spec version, plan,
history and events as that deploy would write them), at most ``batch_workers`` at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_given
from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError, fail_fields
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule
from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import place_batch, policy_item
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import check_cluster_names
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application
from ansible_collections.qonnect.core.plugins.module_utils.runners.batch import ThreadModule

SOURCES = ("src", "spec", "name")
POLICY = ("scorer", "hysteresis", "exclude")


class ApplicationsError(QonnectError, ValueError):
    """Items of ``applications`` that cannot be deployed; ``errors`` names each by its path."""

    summary = "applications: nothing was deployed"

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__(f"{self.summary}: " + "; ".join(self.errors))


class ItemModule(ThreadModule):
    """One application of the list: the task's options with the item's source and policy, the
    plan made for all of them, and the spec already read (``preloaded``)."""

    def __init__(
        self, module: QonnectModule, params: dict[str, Any], preloaded: tuple[Application, dict] | None
    ):
        super().__init__(module, params)
        self.preloaded = preloaded


def item_params(module: QonnectModule, index: int, raw: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The options one item deploys with (the task's, its source and policy over them), or why not."""
    path = f"applications[{index}]"
    if isinstance(raw, str):
        raw = {"src": raw}
    if not isinstance(raw, dict):
        return None, [f"{path}: expected a spec file path or a mapping, got {type(raw).__name__}"]
    errors = [
        f"{path}.{key}: unknown option (expected {', '.join(SOURCES + POLICY)})"
        for key in sorted(set(raw) - set(SOURCES + POLICY))
    ]
    given = [key for key in SOURCES if raw.get(key) is not None]
    if len(given) != 1:
        errors.append(
            f"{path}: give exactly one of {', '.join(SOURCES)}"
            + (f" (got {', '.join(given)})" if given else "")
        )
    exclude = raw.get("exclude")
    if exclude is not None and not (isinstance(exclude, list) and all(isinstance(c, str) for c in exclude)):
        errors.append(f"{path}.exclude: expected a list of cluster names")
    hysteresis = raw.get("hysteresis")
    if hysteresis is not None and (isinstance(hysteresis, bool) or not isinstance(hysteresis, (int, float))):
        errors.append(f"{path}.hysteresis: expected a number")
    if errors:
        return None, errors
    params = dict(module.params, applications=None, src=None, spec=None, name=None)
    params.update({key: raw[key] for key in SOURCES + POLICY if raw.get(key) is not None})
    return params, []


def load_item(
    kb: Any, index: int, params: dict[str, Any]
) -> tuple[tuple[Application, dict] | None, list[str]]:
    """(the application and the spec body to store, or None for a stored one), or its errors."""
    path = f"applications[{index}]"
    try:
        if params.get("name"):
            return (Application.from_dict(kb.get_application(params["name"])["application"]), {}), []
        return load_given(params, kb), []
    except (QonnectError, ValueError) as exc:
        fields = fail_fields(exc)
        return None, [f"{path}: {e}" for e in fields.get("errors") or [fields["msg"]]]


def plan_all(
    kb: Any, loaded: list[tuple[dict[str, Any], Application]], task: dict[str, Any]
) -> tuple[dict[str, dict], dict[str, str]]:
    """One pass of the engine for every application, each with its policy: (plans, why not)."""
    inventory = kb.inventory()
    errors = []
    for i, (params, _app) in enumerate(loaded):
        try:
            check_cluster_names(inventory, exclude=params.get("exclude"))
        except (QonnectError, ValueError) as exc:
            errors.append(f"applications[{i}]: {fail_fields(exc)['msg']}")
    if errors:
        raise ApplicationsError(errors)
    defaults = (task["scorer"], task["hysteresis"])
    items = [
        policy_item(
            app, params.get("scorer"), params.get("hysteresis"), params.get("exclude") or (), defaults
        )
        for params, app in loaded
    ]
    result = place_batch(items, inventory)
    plans = {name: {"services": plan.services} for name, plan in result.plans.items()}
    return plans, {name: str(exc) for name, exc in result.errors.items()}


def run_many(module: QonnectModule, run_one: Callable[[Any], dict]) -> dict[str, Any]:
    """Every application of ``applications`` planned together and deployed; per application
    ``ok``, ``changed``, ``msg``, ``plan`` and ``version``. The task fails when one did."""
    kb = module.kb
    if module.params.get("state") == "absent":
        raise ApplicationsError(["state=absent removes one application: give name, spec or src"])
    errors: list[str] = []
    loaded: list[tuple[dict[str, Any], tuple[Application, dict]]] = []
    for i, raw in enumerate(module.params["applications"]):
        params, problems = item_params(module, i, raw)
        found, more = load_item(kb, i, params) if params is not None else (None, [])
        errors += problems + more
        if params is not None and found is not None:
            loaded.append((params, found))
    names = [found[0].name for _params, found in loaded]
    errors += [
        f"applications: {n} is given more than once" for n in sorted({n for n in names if names.count(n) > 1})
    ]
    if errors:
        raise ApplicationsError(errors)
    plans, unplaceable = plan_all(kb, [(p, found[0]) for p, found in loaded], module.params)

    def one(entry: tuple[dict[str, Any], tuple[Application, dict]]) -> dict[str, Any]:
        params, found = entry
        app = found[0]
        if app.name not in plans:
            why = unplaceable.get(app.name, "no usable fleet")
            return {"ok": False, "changed": False, "msg": f"not deployed: {why}", "plan": None}
        params = dict(params, plan=plans[app.name])
        try:
            result = run_one(ItemModule(module, params, None if params.get("name") else found))
        except Exception as exc:  # one application's error is its outcome, not the others'
            return {"ok": False, "changed": False, "msg": fail_fields(exc)["msg"], "plan": plans[app.name]}
        return {
            "ok": not result.get("failed"),
            "changed": bool(result.get("changed")),
            "msg": str(result.get("message") or result.get("msg") or ""),
            "plan": result.get("plan"),
            "version": result.get("version"),
            "warnings": result.get("warnings") or [],
        }

    workers = max(1, min(len(loaded), int(module.params.get("batch_workers") or 1)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qonnect-deploy") as pool:
        outcomes = dict(zip(names, pool.map(one, loaded), strict=True))
    warnings = [f"{name}: {w}" for name, o in outcomes.items() for w in o.pop("warnings", [])]
    failed = sorted(name for name, o in outcomes.items() if not o["ok"])
    message = f"{len(outcomes) - len(failed)} of {len(outcomes)} applications deployed" + "".join(
        f"; {name}: {outcomes[name]['msg']}" for name in failed
    )
    return {
        "changed": any(o["changed"] for o in outcomes.values()),
        "failed": bool(failed),
        "applications": outcomes,
        "message": message,
        "msg": message,
        "warnings": warnings,
    }
