"""A controller run's outcome as the application's history records it (issue 34, items 4 and 5).

- Superseded: a user's deploy may store a newer version while the controller's run for an
  older one is in flight. The run stops before its next cluster-changing step
  (fencing.FenceGuard checks the stored version too), and whatever it got to, it is recorded
  "superseded by version N": never "succeeded" for the version it was decided for, never
  retried (the newer version is placed by its deploy, or by a spec-changed decision of its
  own), and that version is not marked ready anywhere.
- Every run that ended (succeeded, failed, superseded) is one history row per changed service:
  from -> to clusters, the trigger (the decision's kind, ``rollback`` for a version a rollback
  stored), the decision id, the outcome and the duration; written under the attempt's fencing
  token, so a deposed leader cannot write history either.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.history import moves
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.binding import Binding
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

from qonnect.controller.executor import FAILED, Outcome
from qonnect.controller.statemachine import Decision

log = logging.getLogger("qonnect.controller")

SUPERSEDED = "superseded"
SUPERSEDED_PREFIX = "superseded by version"


def superseding_version(kb: Any, decision: Decision) -> int | None:
    """The application's stored version, if it is newer than the one the decision placed
    (None: not newer, unknown, or the application is gone)."""
    version = decision.get("spec_version")
    if not isinstance(version, int):
        return None
    try:
        current = kb.get_application(decision["app"]).get("version")
    except KBError:
        return None
    return current if isinstance(current, int) and current > version else None


def superseded(outcome: Outcome, newer: int, decision: Decision) -> Outcome:
    """The outcome of a run a newer version overtook: ended, not succeeded, not retried."""
    detail = (
        f"{SUPERSEDED_PREFIX} {newer} (stored while this run placed version "
        f"{decision.get('spec_version')}); run: {outcome.result}: {outcome.detail}"
    )
    return dataclasses.replace(outcome, result=FAILED, detail=detail)


def is_superseded(outcome: Outcome) -> bool:
    return outcome.detail.startswith(SUPERSEDED_PREFIX)


def trigger_of(kb: Any, decision: Decision) -> str:
    """The decision's kind; ``rollback`` when it places a version a rollback stored."""
    kind = str(decision.get("kind") or "controller")
    version = decision.get("spec_version")
    if kind != "spec-changed" or not isinstance(version, int):
        return kind
    try:
        stored = kb.request("GET", f"/api/v1/applications/{decision['app']}/versions/{version}")
    except KBError:
        return kind
    return "rollback" if stored.get("rollback") else kind


def record(
    kb: Any,
    decision: Decision,
    token: dict[str, int],
    outcome: str,
    detail: str,
    before: dict[str, Any] | None,
    started: float | None,
) -> None:
    """One history row per service the run changed (all of them for a version change or a
    failure); the clusters after are the KB's placement now (succeeded, superseded) or the
    plan the attempt tried (failed)."""
    app = decision["app"]
    before = before or {}
    if outcome == "failed":
        after = decision.get("plan") or before
    else:
        try:
            after = current_placement(kb.get_placement(app))
        except KBError as exc:
            log.info("cannot read the placement of %s for its history: %s", app, exc)
            return
    every = outcome != "succeeded" or decision.get("kind") == "spec-changed"
    changes = moves(before, after, every)
    if not changes:
        return
    body: dict[str, Any] = {
        "trigger": trigger_of(kb, decision),
        "decision": str(decision["id"])[:64],
        "outcome": outcome,
        "detail": detail[:2000],
        "started": started if started is not None else time.time(),
        "ended": time.time(),
        "changes": changes,
        "fencing": {"term": int(token["term"]), "seq": int(token["seq"])},
    }
    if isinstance(decision.get("spec_version"), int):
        body["version"] = decision["spec_version"]
    try:
        kb.record_history(app, body)
    except KBError as exc:
        log.warning("cannot record the history of decision %s: %s", decision["id"], exc)


def adopt_intent(kb: Any, decision: Decision) -> bool:
    """A withdrawn hedge (its cluster came back while its run waited): the Binding its run wrote
    before touching a cluster becomes the current placement under the attempt's own token, since
    its standby copies may be on their clusters. The discard that follows then removes them (it
    converges from the current placement); retracting it instead would leave them orphans the
    reconciler only removes once they are a minute old. Whether it was adopted."""
    return _settle_intent(kb, decision, "current", "adopted as the current placement until discarded")


def retract_intent(kb: Any, decision: Decision) -> bool:
    """After a decision ended without success: the desired placement its last attempt's run
    wrote before touching a cluster (runners/deploy.write_intent), left behind when that run was
    killed, goes back to the current placement under the attempt's own token (the KB accepts
    that as the Binding's retraction). Only the attempt's own intent: a user's deploy in
    progress has written another one. Whether it was retracted."""
    return _settle_intent(kb, decision, "desired", "retracted to the current placement")


def _settle_intent(kb: Any, decision: Decision, field: str, done: str) -> bool:
    """The attempt's own intent (the KB's desired placement, when it is this attempt's Binding and
    differs from the current one) made the current placement (``field`` "current") or replaced
    by it (``field`` "desired"), under the attempt's token. Whether anything was written."""
    plan, token = decision.get("plan"), decision.get("attempt_token")
    if not plan or not token:
        return False
    app = decision["app"]
    try:
        record = kb.get_placement(app)
        desired, current = record.get("desired"), current_placement(record)
        if desired != Binding.from_services(app, plan).placement():
            return False  # not this attempt's intent (none, completed, or a user's deploy's)
        if desired == current:
            return False
        kb.put_placement(app, {field: desired if field == "current" else current}, token)
    except (KBError, InputError) as exc:
        log.info("cannot settle the intent of decision %s on %s: %s", decision.get("id"), app, exc)
        return False
    log.warning("decision %s ended: its run's intent for %s %s", decision.get("id"), app, done)
    return True
