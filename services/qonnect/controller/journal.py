"""The controller's reads from and writes to the KB.

The KB is the durable record of every decision (a replica's Raft journal is on disk before it
acknowledges an entry, but every replica can lose its disk at once): a decision is written as an
event before anything acts on it, each attempt's start and outcome too, so a new leader - even
one whose replicas all lost their logs - can tell what was done. Each event
carries a structured reference to its decision (``ref``: id, token, attempt, exclusions) and
the writer's fencing token (``fencing``), which the KB refuses once a newer leader raised the
fence. Only events the KB says were written under a controller token are trusted: an agent or a
person cannot make the controller re-commit a decision.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

from qonnect.controller.detector import Memory, Notice, Snapshot
from qonnect.controller.view import FleetView

DECISION = "controller.decision"
STARTED = "controller.migration.started"
SUCCEEDED = "controller.migration.succeeded"
FAILED = "controller.migration.failed"
CANCELLED = "controller.migration.cancelled"
ENDED = {SUCCEEDED: "succeeded", FAILED: "failed", CANCELLED: "cancelled"}
GAVE_UP = "controller.decision.ended"  # a decision ended without success (gave up, cancelled)
SUPERSEDED = "controller.decision.superseded"  # lost with every replica's log; re-decided as another
DEFERRED = "controller.decision.deferred"  # no attempt now: e.g. no eligible cluster; retried later
RECONCILED = "controller.cluster.reconciled"  # a recovered cluster was cleaned of what the KB does not place
CLUSTER_EVENT = "controller.cluster."  # + a detector Notice kind: what the leader saw, no move made
RECOVERED = CLUSTER_EVENT + "cluster-recovered"  # seen down or suspect, then back: when (durable memory)
VERSION_FAILING = "controller.version.failing"  # a version failed on enough clusters: not moved again
ROLLED_BACK = "controller.version.rolled-back"  # ... and an older version's spec stored again as the newest
# a run that ended after a user's deploy stored a newer version: what runs is that version
MIGRATION_SUPERSEDED = "controller.migration.superseded"
DONE = (SUCCEEDED, GAVE_UP, SUPERSEDED, MIGRATION_SUPERSEDED)  # a decision with one of these events has ended


def ref(
    decision: Mapping[str, Any], attempt: int | None = None, token: dict[str, int] | None = None
) -> dict[str, Any]:
    """The structured reference of an event to its decision (the exclusions only on the decision)."""
    token = token or decision["token"]
    return {
        "id": decision["id"],
        "term": int(token["term"]),
        "seq": int(token["seq"]),
        "attempt": attempt,
        "exclude": list(decision["exclude"]) if attempt is None else [],
    }


def post(
    kb: Any,
    etype: str,
    decision: Mapping[str, Any],
    text: str,
    attempt: int | None = None,
    token: dict[str, int] | None = None,
    fence: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Write one event about a decision under fencing token ``fence`` (default: the attempt's or
    the decision's own token). Raises KBError when the KB refuses (409: a newer leader) or is away."""
    excluded = decision["exclude"]
    cluster = excluded[0] if len(excluded) == 1 else None
    names = f" (clusters {', '.join(excluded)})" if len(excluded) > 1 and attempt is None else ""
    fencing = fence or token or decision["token"]
    return kb.post_event(
        {
            "type": etype,
            "reason": decision.get("kind") or "",
            "message": (text + names)[-8000:],
            "application": decision["app"],
            "cluster": cluster,
            "ref": ref(decision, attempt, token),
            "fencing": {"term": int(fencing["term"]), "seq": int(fencing["seq"])},
        }
    )


def raise_fence(kb: Any, token: dict[str, int]) -> dict[str, Any]:
    """Announce a new leader's token to the KB; from then on older tokens are refused."""
    return kb.raise_fence(token)


def fence(kb: Any) -> tuple[int, int]:
    """The KB's controller fence (term, seq)."""
    found = kb.get_fence()
    return int(found.get("term") or 0), int(found.get("seq") or 0)


# one cached view per KB client (controller/view.py), kept current from the KB's change feed
_VIEWS: weakref.WeakKeyDictionary[Any, FleetView] = weakref.WeakKeyDictionary()


def view_of(kb: Any) -> FleetView:
    """The cached view of this KB client (made, with a full read, on first use)."""
    view = _VIEWS.get(kb)
    if view is None:
        view = _VIEWS[kb] = FleetView(kb)
    return view


def read_snapshot(kb: Any, now: float) -> tuple[Snapshot, list[dict[str, Any]]]:
    """One consistent-enough view of the KB for the detector, plus the raw placement records:
    from the cached view that the KB's change feed keeps current (a tick reads what changed, not
    the whole fleet); a KB client without the feed is read whole."""
    if hasattr(kb, "changes"):
        return view_of(kb).read(now)
    return read_whole(kb, now)


def read_whole(kb: Any, now: float) -> tuple[Snapshot, list[dict[str, Any]]]:
    """The Snapshot from full reads of the inventory, placements, workloads and applications."""
    inventory = kb.inventory()
    placements = kb.request("GET", "/api/v1/placements")["placements"]
    inventory = dict(inventory)
    inventory["placements"] = {p["application"]: current_placement(p) for p in placements}
    snapshot = Snapshot(
        inventory=inventory, workloads=kb.list_workloads(), applications=kb.list_applications(), now=now
    )
    return snapshot, placements


def kb_floor(placements: list[dict[str, Any]], fence_term: int = 0) -> int:
    """The newest fencing term the KB has accepted (placements and the controller fence)."""
    return max([int((p.get("fencing") or {}).get("term") or 0) for p in placements] + [fence_term])


def trusted(event: dict[str, Any]) -> bool:
    """A controller event the KB says a controller token wrote, with its structured reference."""
    return (
        str(event.get("type", "")).startswith("controller.")
        and event.get("role") == "controller"
        and isinstance(event.get("ref"), dict)
        and bool(event["ref"].get("id"))
    )


def decision_story(kb: Any, app: str, limit: int = 500) -> list[dict[str, Any]]:
    """Our events about an application, oldest first (only those written under a controller token)."""
    events = kb.list_events(application=app, limit=limit)
    return sorted((e for e in events if trusted(e)), key=lambda e: e.get("id", 0))


def done_in_kb(kb: Any, decision: Mapping[str, Any]) -> str | None:
    """Whether the KB shows the running attempt of a decision already succeeded, and why we think so.

    Either its success event is there, or the application's placement was last written with that
    attempt's fencing token (the playbook finished its write but the leader died before reporting).
    """
    token = decision.get("attempt_token")
    if not token:
        return None
    for event in decision_story(kb, decision["app"]):
        r = event["ref"]
        if r["id"] == decision["id"] and r["attempt"] == decision["attempts"] and event["type"] == SUCCEEDED:
            return f"KB event {event.get('id')} records attempt {r['attempt']} succeeded"
    try:
        record = kb.get_placement(decision["app"])
    except KBError as exc:
        if exc.status == 404:  # no placement yet: not done
            return None
        raise
    fencing = record.get("fencing") or {}
    if (fencing.get("term"), fencing.get("seq")) == (token["term"], token["seq"]) and placed(
        record, decision
    ):
        return (
            f"the KB placement of {decision['app']} was written with attempt {decision['attempts']}'s token"
        )
    return None


def _clusters(placement: Any) -> dict[str, list[str]]:
    """service -> its clusters, sorted (roles and node details left out)."""
    if not isinstance(placement, Mapping):
        return {}
    return {
        svc: sorted(str(t.get("cluster")) for t in targets if isinstance(t, Mapping))
        for svc, targets in placement.items()
        if isinstance(targets, list)
    }


def placed(record: Mapping[str, Any], decision: Mapping[str, Any]) -> bool:
    """Whether a placement record written under an attempt's token is that attempt's finished
    write, not the intent it wrote before touching any cluster (``desired`` only) nor the
    retraction of a failed attempt (``desired`` back to what runs): ``current`` is what the
    decision placed - its committed plan's clusters, or else a placement off its excluded clusters."""
    current = _clusters(record.get("current"))
    if current != _clusters(record.get("desired")):
        return False  # the intent alone
    if not current:
        return False
    plan = decision.get("plan")
    if isinstance(plan, Mapping) and plan:
        return current == _clusters(plan)
    avoid = set(decision.get("exclude") or ())
    return not any(set(cs) & avoid for cs in current.values())


def unfinished_in_kb(kb: Any, newest: tuple[int, int], apps: list[str]) -> list[dict[str, Any]]:
    """Decisions the KB recorded without an outcome and with a token newer than any in the
    replicated log (so the log lost them: every replica lost its data): the newest such decision
    event per application, to be decided again."""
    found = []
    for app in apps:
        story = decision_story(kb, app)
        ended = {e["ref"]["id"] for e in story if e["type"] in DONE}
        lost = [
            e
            for e in story
            if e["type"] == DECISION
            and e["ref"]["id"] not in ended
            and (e["ref"]["term"], e["ref"]["seq"]) > newest
        ]
        if lost:
            found.append(lost[-1])
    return found


def post_notice(kb: Any, notice: Notice, fence: dict[str, int] | None) -> dict[str, Any]:
    """Write a leader's notice about a cluster (agent down, credentials broken, recovered...)
    as ``controller.cluster.<kind>``, at the time it was seen, under the leader's fence."""
    event: dict[str, Any] = {
        "type": CLUSTER_EVENT + notice.kind,
        "reason": notice.kind,
        "message": notice.text[:8000],
        "cluster": notice.cluster,
        "ts": notice.ts,
    }
    if fence:
        event["fencing"] = {"term": int(fence["term"]), "seq": int(fence["seq"])}
    return kb.post_event(event)


def post_version_failing(kb: Any, trigger: Any, fence: dict[str, int] | None) -> dict[str, Any]:
    """Say that a spec version fails wherever it went and is no longer moved (the clusters it
    failed on and the last reason are in the message), under the leader's fence."""
    event: dict[str, Any] = {
        "type": VERSION_FAILING,
        "reason": "version-failing",
        "message": trigger.reason[:8000],
        "application": trigger.app,
        "ts": trigger.failed_at,
    }
    if fence:
        event["fencing"] = {"term": int(fence["term"]), "seq": int(fence["seq"])}
    return kb.post_event(event)


def post_rolled_back(
    kb: Any, trigger: Any, restored: int, stored: int, fence: dict[str, int] | None
) -> dict[str, Any]:
    """Say that a failing version was rolled back: which version's spec is stored again, as
    which new version, and why (the failing event's text: clusters and reasons)."""
    event: dict[str, Any] = {
        "type": ROLLED_BACK,
        "reason": "version-rollback",
        "message": (
            f"rolled {trigger.app} back from version {trigger.spec_version} to version {restored}'s spec, "
            f"stored as version {stored}: {trigger.reason}"
        )[:8000],
        "application": trigger.app,
    }
    if fence:
        event["fencing"] = {"term": int(fence["term"]), "seq": int(fence["seq"])}
    return kb.post_event(event)


def recovered_in_kb(kb: Any, now: float, window: float) -> dict[str, float]:
    """cluster -> when it last recovered, per the recovery events controllers wrote in the last
    ``window`` seconds (a person's or an agent's event of that type is not trusted)."""
    found: dict[str, float] = {}
    for event in kb.list_events(since=now - window, limit=1000):
        if event.get("type") == RECOVERED and event.get("role") == "controller" and event.get("cluster"):
            found[event["cluster"]] = max(found.get(event["cluster"], 0.0), float(event["ts"]))
    return found


def seed_memory(memory: Memory, recovered: dict[str, float]) -> None:
    """A new leader's memory of what recovered when (the same stabilisation window as the
    leader that saw it): such a cluster is neither a target nor stable until its window ends."""
    for cluster, ts in recovered.items():
        memory.recovered_at[cluster] = ts
        memory.healthy_since[cluster] = ts
        memory.noticed[cluster] = "cluster-recovered"


def started_text(decision: Mapping[str, Any], attempt: int, node: str) -> str:
    """What an attempt does, as its start event says it: the exclusions are clusters avoided
    (down, suspect, just recovered or pinned), not necessarily clusters the application leaves."""
    avoid = list(decision.get("exclude") or [])
    kind = decision.get("kind") or "recovered"
    why = {"qos-drift": "for a better QoS", "spec-changed": "for its new version"}.get(kind, f"({kind})")
    where = f"avoiding {', '.join(avoid)}" if avoid else "on any eligible cluster"
    return f"attempt {attempt} by {node}: re-placing {decision['app']} {why}, {where}"
