# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy module's runner: place, record the intent, apply (k8s/deployer.py), record the
outcome in the KB; or sweep an application off every cluster.

The runner returns the deployer's result with ``failed`` set when a cluster refused: the
module then fails with the per-cluster results (module.py reports it).
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.app_source import (
    load_app_from_params,
    load_given,
    store,
    stored_application,
)
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError, fence_guard
from ansible_collections.qonnect.core.plugins.module_utils.history import describe, moves
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import resolve as resolve_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import (
    application_deployer,
    target_of,
)
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule
from ansible_collections.qonnect.core.plugins.module_utils.placement.binding import Binding
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    Application,
)
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent as records
from ansible_collections.qonnect.core.plugins.module_utils.runners import survive
from ansible_collections.qonnect.core.plugins.module_utils.runners.batch import run_batch
from ansible_collections.qonnect.core.plugins.module_utils.runners.many import run_many
from ansible_collections.qonnect.core.plugins.module_utils.runners.placement import (
    check_options,
    compute_plan,
)
from ansible_collections.qonnect.core.plugins.module_utils.runners.progress import Progress

STALE_FENCE_HINT = "a newer controller decision is stored: fencing token too old"


def previous_placement(kb: Any, app: str) -> dict:
    try:
        stored = kb.get_placement(app)
    except KBError as exc:
        if exc.status == 404:
            return {}
        raise
    return current_placement(stored)


def put_fenced(kb: Any, app: str, placement: dict, fencing: dict | None) -> None:
    """Write a placement with the run's fencing token; a refusal says why (a newer decision)."""
    try:
        kb.put_placement(app, placement, fencing)
    except KBError as exc:
        if exc.status == 409 and fencing:
            raise exc.with_context(hint=STALE_FENCE_HINT) from None
        raise


def write_intent(kb: Any, app: str, placement: dict, fencing: dict | None) -> None:
    """The Binding this run converges to, written as the application's desired placement before
    any cluster is touched: a user's deploy unfenced, a controller's run under its token, so a
    deposed leader's run stops here, before its first cluster write (issue 38)."""
    try:
        kb.put_placement(app, {"desired": placement}, fencing)
    except KBError as exc:
        if exc.status == 409 and fencing:
            raise FencedError(
                f"fencing: stopped before apply: {STALE_FENCE_HINT} (the KB refused the placement "
                f"of {app} under term {fencing.get('term')}, seq {fencing.get('seq')}: {exc})"
            ) from None
        raise


def targets(
    kb: Any, names: set[str], overrides: dict, records: dict | None = None, params: dict | None = None
) -> dict[str, Target]:
    """Each cluster's credentials (k8s/auth.py: KB paths, kubeconfig content, K8S_AUTH_*)."""
    if records is None:
        records = {c["name"]: c for c in kb.list_clusters()} if names else {}
    credentials = resolve_credentials(names, records, overrides, params or {})
    out = {}
    for name in sorted(names):
        record = records.get(name, {})
        kubeconfig, context = credentials[name]
        out[name] = target_of(name, record, kubeconfig, context)
    return out


def plan_services(plan: dict) -> dict:
    """Accept a whole plan or only its services mapping; every problem of it at once
    (placement/binding.py: the one validator of a plan from outside)."""
    return Binding.from_services("", plan.get("services", plan)).services_dict()


def placement_of(chosen: dict) -> dict:
    """The plan's services as the KB stores a placement: {service: [{cluster, replicas, nodes}]}."""
    return Binding.from_services("", chosen).placement()


def event(kb: Any, body: dict, warnings: list) -> None:
    try:
        kb.post_event(body)
    except KBError as exc:
        warnings.append(f"could not record the event: {exc}")


def removal_target(module: QonnectModule, kb: Any) -> tuple[str, str, dict]:
    """The application to remove: its name, namespace and manifests per service (the last two
    unknown when the KB no longer holds it and no spec is given)."""
    params = module.params
    if params.get("src") or params.get("spec") is not None:
        app: Application | None = load_given(params)[0]
    else:
        stored = stored_application(kb, params["name"])
        app = Application.from_dict(stored["application"]) if stored else None
    if app is None:
        return params["name"], params["name"], {}
    return app.name, app.namespace, {s.name: s.manifests for s in app.services}


def remove(module: QonnectModule, kb: Any) -> dict:
    """Sweep every registered cluster for objects labelled with the application; idempotent,
    and fine for an application the KB no longer knows."""
    params = module.params
    name, namespace, services = removal_target(module, kb)
    previous = previous_placement(kb, name)
    overrides = params.get("kubeconfigs") or {}
    records = {c["name"]: c for c in kb.list_clusters()}
    reachable: dict[str, Target] = {}
    warnings = []
    for cluster in sorted(set(records) | set(overrides)):  # every registered cluster
        try:
            reachable.update(targets(kb, {cluster}, overrides, records, params))
        except ValueError as exc:
            warnings.append(f"cluster {cluster}: not swept: {exc}")
    deployer = Deployer(
        name,
        namespace,
        services,
        {},
        reachable,
        previous=set(reachable),
        check_mode=module.check_mode,
        before_step=fence_guard(kb, params.get("fencing")),
    )
    started = time.time()
    result = deployer.remove()
    for cluster, res in result["clusters"].items():
        if res["status"] == "unreachable":
            warnings.append(
                f"cluster {cluster} is unreachable ({res['error']}): objects of {name} "
                "may remain there; run the removal again when it is back"
            )
    unreachable = {c for c, r in result["clusters"].items() if r["status"] == "unreachable"}
    result["failed"] = any(r["status"] == "failed" for r in result["clusters"].values())
    if params["record"] and not module.check_mode and previous and not result["failed"] and not unreachable:
        put_fenced(kb, name, {"desired": {}, "current": {}}, params.get("fencing"))
        # what ran where is gone: a history row per service (kept while the spec is, keep_spec)
        record_history(kb, name, None, result, moves(previous, {}, False), started, trigger="remove")
        event(
            kb,
            {
                "type": "deploy",
                "reason": "Removed",
                "application": name,
                "message": params.get("reason") or result["message"],
            },
            warnings,
        )
    result["changed"] = result["changed"] or bool(previous)
    result["plan"] = {"services": {}}
    result["warnings"] = result.get("warnings", []) + warnings
    return result


# Seconds every new pod must stay Ready, no restart, for a deploy's rollout to count (option
# min_ready_seconds; k8s/readiness.ReadyWindow). A controller's fenced migration uses 0 unless
# given: it judges a version by the agents' reports (failure grace, version bound, rollback).
DEFAULT_MIN_READY_SECONDS = 3.0


def min_ready_seconds(params: dict) -> float:
    """The minimum-ready window of this run (see DEFAULT_MIN_READY_SECONDS)."""
    value = params.get("min_ready_seconds")
    if value is None:
        return 0.0 if params.get("fencing") else DEFAULT_MIN_READY_SECONDS
    return max(0.0, float(value))


def deployer_for(
    module: QonnectModule,
    kb: Any,
    app: Application,
    chosen: dict,
    old_clusters: set,
    version: int | None = None,
    hold: set[str] | None = None,
) -> Deployer:
    """The deployer of this run: the plan's clusters and those the application leaves
    (``version``: the stored version a controller's run places; a newer one stops it)."""
    params = module.params
    new_clusters = {e["cluster"] for entries in chosen.values() for e in entries}
    return application_deployer(
        app,
        chosen,
        targets(kb, new_clusters | old_clusters, params.get("kubeconfigs") or {}, params=params),
        previous=old_clusters,
        check_mode=module.check_mode,
        wait=params["wait"],
        wait_timeout=params["wait_timeout"],
        min_ready_seconds=min_ready_seconds(params),
        before_step=fence_guard(kb, params.get("fencing"), app.name, version),
        adopt=params.get("adopt") or None,
        # a slow rollout's progress as KB events (runners/progress.py)
        progress=Progress(kb, app.name, params["wait_timeout"]) if params["record"] else None,
        hold=hold or set(),
    )


def held(plan: dict) -> set[str]:
    """The clusters a plan says not to touch (``hold``, a suspect cluster during a hedge)."""
    hold = plan.get("hold") or []
    if not isinstance(hold, list) or not all(isinstance(c, str) and c for c in hold):
        raise InputError("plan.hold", f"{hold!r} is not a list of cluster names")
    return set(hold)


def record_history(
    kb: Any,
    app: str,
    version: int | None,
    result: dict,
    changes: list[dict],
    started: float,
    trigger: str = "deploy",
) -> None:
    """A user's deploy (or removal, ``trigger``) in the application's history: what it placed
    where (succeeded: the version ran Ready there), or where it failed (the version is marked
    failed there)."""
    if not changes:
        return
    failed_on = sorted(c for c, r in result["clusters"].items() if r["status"] in ("failed", "unreachable"))
    body: dict[str, Any] = {
        "trigger": trigger,
        "outcome": "failed" if result["failed"] else "succeeded",
        "detail": (result.get("message") or "")[:2000],
        "started": started,
        "ended": time.time(),
        "changes": changes,
        "failed_on": failed_on if result["failed"] else [],
    }
    if version is not None:
        body["version"] = version
    try:
        kb.record_history(app, body)
    except KBError as exc:
        result["warnings"].append(f"could not record the history: {exc}")


def current_version(kb: Any, app: str) -> int | None:
    """The application's stored version (None when the KB does not hold it)."""
    stored = stored_application(kb, app)
    return stored.get("version") if stored else None


def record_failure(
    kb: Any, app: str, result: dict, previous: dict, intent: bool, fencing: dict | None = None
) -> None:
    """After a failed deploy: the intent is retracted (desired := the previous placement, under
    the run's token for a controller's run), and each refusing cluster gets a DeployFailed event."""
    if intent:
        try:
            kb.put_placement(app, {"desired": previous}, fencing)
        except KBError as exc:
            if not (fencing and exc.status == 409):
                raise
            # a newer leader's write replaced this run's intent: the record is its now
            result["warnings"].append(f"intent not retracted: {exc}")
    for name, res in result["clusters"].items():
        if res["status"] in ("failed", "unreachable"):
            event(
                kb,
                {
                    "type": "deploy",
                    "reason": "DeployFailed",
                    "application": app,
                    "cluster": name,
                    "message": res["error"] or "",
                },
                result["warnings"],
            )


def record_success(
    module: QonnectModule, kb: Any, app: str, result: dict, placement: dict, previous: dict
) -> None:
    """After a deploy: the placement (fenced, for a controller's run) and a Deployed event."""
    params = module.params
    if placement != previous:
        put_fenced(kb, app, {"desired": placement, "current": placement}, params.get("fencing"))
        result["changed"] = True
    if result["changed"]:
        message = params.get("reason") or result["message"]
        moved = describe(moves(previous, placement, False))
        event(
            kb,
            {
                "type": "deploy",
                "reason": "Deployed",
                "application": app,
                "message": f"{message} ({moved})" if moved else message,
            },
            result["warnings"],
        )


def application_of(module: QonnectModule, kb: Any, given: bool) -> tuple[Application, Any]:
    """The application to deploy and the spec body to store (None for a stored one): read
    already with the others of a list (runners/many.py), else from the options."""
    preloaded = getattr(module, "preloaded", None)
    if preloaded is not None:
        return preloaded
    if given:
        return load_given(module.params, kb)
    return load_app_from_params(module.params, kb), None


def run(module: QonnectModule) -> dict:
    if module.params.get("batch"):
        return run_batch(module, run)
    if module.params.get("applications"):
        return run_many(module, run)
    params, kb = module.params, module.kb
    if params["state"] == "absent":
        return remove(module, kb)
    given = bool(params.get("src") or params.get("spec") is not None)
    # a controller's run places the stored version: read before the spec, so a version stored
    # in between stops the run (fencing.FenceGuard) rather than passing for this one
    fenced_run = params.get("fencing") and not given and params.get("name")
    placing = current_version(kb, params["name"]) if fenced_run else None
    app, body = application_of(module, kb, given)
    previous = previous_placement(kb, app.name)
    old_clusters = {e["cluster"] for entries in previous.values() for e in entries}

    # Place first: a spec is stored only once it validates and places (issue 13.5).
    if params.get("plan") and params.get("exclude"):  # stored as the policy: checked all the same
        check_options(kb.list_clusters(), params)
    inventory: dict | None = None  # read once, for the plan and require_survivable
    if params.get("plan"):
        plan = dict(params["plan"])
    else:
        inventory = kb.inventory()
        plan = compute_plan(app, inventory, params, False)
    chosen = plan_services(plan)
    plan["services"] = chosen
    plan.pop("explanation", None)  # the placement module returns it; here it would only be noise
    if params.get("require_survivable"):  # refused before anything is changed anywhere
        survive.check(kb, app, placement_of(chosen), records.policy_of(params), inventory)
    deployer = deployer_for(module, kb, app, chosen, old_clusters, placing, held(plan))
    # A user's deploy (not the controller's fenced run) says what it is doing before the new
    # version becomes visible: the controller then leaves that version to it, and heals the
    # application later with the policy given here.
    user_deploy = params["record"] and not module.check_mode and not params.get("fencing")
    notes: list = []
    # the KB's record of the application, read once: the version it holds and its policy
    existing = stored_application(kb, app.name) if user_deploy or (given and params["record"]) else None
    if user_deploy:  # only when it changes the version or the policy: a rerun writes nothing
        new_version = given and store(kb, app, body, True, existing)["changed"]
        user_deploy = records.worth_recording(kb, app.name, params, new_version, existing)
    if user_deploy:
        event(kb, records.event(app.name, records.APPLYING, records.policy_of(params)), notes)
    stored = store(kb, app, body, module.check_mode, existing) if given and params["record"] else None
    placement = placement_of(chosen)
    # The intent before any cluster is touched, so whatever this run applies can be found, and
    # completed or retracted afterwards under the same token (kb/ops.put_placement).
    intent = params["record"] and not module.check_mode and placement != previous
    if intent:
        write_intent(kb, app.name, placement, params.get("fencing"))
    started = time.time()
    result = deployer.run()
    result["plan"] = plan
    if stored is not None:
        result["version"] = stored["version"]
        result["changed"] = result["changed"] or stored["changed"]
    result["warnings"] = result.get("warnings", []) + notes
    if user_deploy:  # the deploy is done with this version (the controller may observe it)
        done = records.FAILED if result["failed"] else records.APPLIED
        version = stored["version"] if stored is not None else None
        event(kb, records.event(app.name, done, records.policy_of(params), version), result["warnings"])
    if not params["record"] or module.check_mode:
        result["changed"] = result["changed"] or (params["record"] and placement != previous)
        return result
    if result["failed"]:
        record_failure(kb, app.name, result, previous, intent, params.get("fencing"))
    else:
        record_success(module, kb, app.name, result, placement, previous)
    if not params.get("fencing"):  # a controller's run: the controller records its outcome
        new = bool(stored and stored["changed"])
        changes = moves(previous, placement, new or result["failed"])
        version = stored["version"] if stored else current_version(kb, app.name) if changes else None
        record_history(kb, app.name, version, result, changes, started)
    return result
