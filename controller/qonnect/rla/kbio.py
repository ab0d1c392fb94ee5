"""The controller's reads from and writes to the KB.

The KB is the durable record of every decision (pysyncobj's journal is not fsynced): a decision
is written as an event before anything acts on it, each attempt's start and outcome too, so a
new leader - even one whose replicas all lost their logs - can tell what was done. Events carry
a machine-readable reference ``[decision ID token TERM/SEQ attempt N]`` at the end of a message
written for people.
"""

from __future__ import annotations

import re
from typing import Any

from qonnect.rla.detector import Snapshot

DECISION = "controller.decision"
STARTED = "controller.migration.started"
SUCCEEDED = "controller.migration.succeeded"
FAILED = "controller.migration.failed"
CANCELLED = "controller.migration.cancelled"
ENDED = {SUCCEEDED: "succeeded", FAILED: "failed", CANCELLED: "cancelled"}
GAVE_UP = "controller.decision.ended"  # a decision ended without success (gave up, cancelled)
SUPERSEDED = "controller.decision.superseded"  # lost with every replica's log; re-decided as another
DONE = (SUCCEEDED, GAVE_UP, SUPERSEDED)  # a decision with one of these events has ended
_REF = re.compile(r"\[decision (?P<id>[\w.]+) token (?P<term>\d+)/(?P<seq>\d+)"
                  r"(?: attempt (?P<attempt>\d+))?(?: exclude (?P<exclude>[\w.,-]*))?\]$")


def ref(decision: dict[str, Any], attempt: int | None = None, token: dict[str, int] | None = None) -> str:
    """The machine-readable tail of an event message (the exclusions only on the decision itself)."""
    token = token or decision["token"]
    tail = f" attempt {attempt}" if attempt is not None else f" exclude {','.join(decision['exclude'])}"
    return f"[decision {decision['id']} token {token['term']}/{token['seq']}{tail}]"


def parse_ref(message: str) -> dict[str, Any] | None:
    """The reference at the end of one of our event messages, or None."""
    match = _REF.search(message or "")
    if not match:
        return None
    return {"id": match["id"], "term": int(match["term"]), "seq": int(match["seq"]),
            "attempt": int(match["attempt"]) if match["attempt"] else None,
            "exclude": [c for c in (match["exclude"] or "").split(",") if c]}


def post(kb: Any, etype: str, decision: dict[str, Any], text: str, attempt: int | None = None,
         token: dict[str, int] | None = None) -> None:
    """Write one event about a decision (raises KBError when the KB refuses or is away)."""
    cluster = decision["exclude"][0] if len(decision["exclude"]) == 1 else None
    message = f"{text} {ref(decision, attempt, token)}"
    kb.post_event({"type": etype, "reason": decision.get("kind") or "", "message": message[-8000:],
                   "application": decision["app"], "cluster": cluster})


def current_placement(record: dict[str, Any]) -> dict[str, Any]:
    """Where an application runs: the placement's ``current`` if known, else ``desired``."""
    return record.get("current") or record.get("desired") or {}


def read_snapshot(kb: Any, now: float) -> tuple[Snapshot, list[dict[str, Any]]]:
    """One consistent-enough view of the KB for the detector, plus the raw placement records."""
    inventory = kb.inventory()
    placements = kb.request("GET", "/api/v1/placements")["placements"]
    inventory = dict(inventory)
    inventory["placements"] = {p["application"]: current_placement(p) for p in placements}
    snapshot = Snapshot(inventory=inventory, workloads=kb.list_workloads(),
                        applications=kb.list_applications(), now=now)
    return snapshot, placements


def kb_floor(placements: list[dict[str, Any]]) -> int:
    """The newest fencing term the KB has accepted."""
    return max([int((p.get("fencing") or {}).get("term") or 0) for p in placements] or [0])


def decision_story(kb: Any, app: str, limit: int = 500) -> list[dict[str, Any]]:
    """Our events about an application, oldest first, each with its parsed reference."""
    events = kb.list_events(application=app, limit=limit)
    story = []
    for event in events:
        if event.get("type", "").startswith("controller."):
            parsed = parse_ref(event.get("message", ""))
            if parsed:
                story.append(dict(event, ref=parsed))
    return sorted(story, key=lambda e: e.get("id", 0))


def done_in_kb(kb: Any, decision: dict[str, Any]) -> str | None:
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
    except Exception:  # no placement yet: not done
        return None
    fencing = record.get("fencing") or {}
    if (fencing.get("term"), fencing.get("seq")) == (token["term"], token["seq"]):
        return f"the KB placement of {decision['app']} was written with attempt {decision['attempts']}'s token"
    return None


def unfinished_in_kb(kb: Any, newest: tuple[int, int], apps: list[str]) -> list[dict[str, Any]]:
    """Decisions the KB recorded without an outcome and with a token newer than any in the
    replicated log (so the log lost them: every replica lost its data): the newest such decision
    event per application, to be decided again."""
    found = []
    for app in apps:
        story = decision_story(kb, app)
        ended = {e["ref"]["id"] for e in story if e["type"] in DONE}
        lost = [e for e in story if e["type"] == DECISION and e["ref"]["id"] not in ended
                and (e["ref"]["term"], e["ref"]["seq"]) > newest]
        if lost:
            found.append(lost[-1])
    return found
