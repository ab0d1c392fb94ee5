# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's deploy, as the KB records it for the controller: the intent and the policy.

The deploy module (a user's run, not the controller's fenced one) writes a ``deploy.intent``
event before it touches the spec or a cluster (``applying``) and one when it is done
(``applied`` with the spec version it placed, or ``failed``). Each carries the placement policy
the user chose (scorer, hysteresis, exclusions), so that:

- a heal places the application the way the user deployed it (the controller reads the policy
  of the newest ``applied`` intent; a migration is not a new policy);
- the controller does not re-place a spec version the deploy playbook is applying at the same
  time (one writer per spec version): it waits while an ``applying`` intent is open and fresh,
  and simply observes the version the deploy placed.

The record is the event's structured ``data`` (its message is a sentence for a person; events
written before the KB had ``data`` carry the record as JSON in the message, and still count);
only events written under an admin token count, so an agent or a reader cannot change how the
controller places an application. A ``failed`` record of a version keeps the controller from
placing that version on its own (a later version, or a rollback, moves on).
"""

from __future__ import annotations

import json
import time
from typing import Any

TYPE = "deploy.intent"
APPLYING, APPLIED, FAILED = "applying", "applied", "failed"
STATES = (APPLYING, APPLIED, FAILED)
LOOKBACK = 500  # events of an application read to find its newest intent
WRITERS = ("admin",)  # roles whose intents count (the roles that may deploy)


def policy_of(params: dict[str, Any]) -> dict[str, Any]:
    """The placement policy of a deploy's options."""
    return {
        "scorer": params.get("scorer"),
        "hysteresis": params.get("hysteresis"),
        "exclude": sorted(str(c) for c in params.get("exclude") or ()),
    }


def describe_policy(policy: dict[str, Any]) -> str:
    """A policy as a person reads it: 'scorer optimal, hysteresis 0.1, excluding edge-1'."""
    parts = [f"scorer {policy.get('scorer') or 'default'}"]
    if policy.get("hysteresis") is not None:
        parts.append(f"hysteresis {policy['hysteresis']:g}")
    exclude = policy.get("exclude") or []
    parts.append(f"excluding {', '.join(exclude)}" if exclude else "no excluded clusters")
    return ", ".join(parts)


def prose(app: str, state: str, policy: dict[str, Any], version: int | None = None) -> str:
    """The message of an intent event: what the deploy does, in a sentence."""
    which = f"version {version} of {app}" if version is not None else app
    if state == APPLYING:
        return (
            f"a user's deploy is applying {which} ({describe_policy(policy)}); the controller leaves it to it"
        )
    if state == APPLIED:
        return f"a user's deploy placed {which} ({describe_policy(policy)})"
    return (
        f"a user's deploy of {which} failed; the controller does not place "
        + (f"version {version}" if version is not None else "it")
        + " on its own (deploy a fix, or roll back)"
    )


def event(app: str, state: str, policy: dict[str, Any], version: int | None = None) -> dict[str, Any]:
    """The KB event body of one intent record: prose in the message, the record in ``data``."""
    body = {"state": state, "policy": policy, "version": version, "ts": time.time()}
    return {
        "type": TYPE,
        "reason": state,
        "application": app,
        "message": prose(app, state, policy, version),
        "data": body,
    }


def parse(event_: dict[str, Any], writers: tuple[str | None, ...] = WRITERS) -> dict[str, Any] | None:
    """An intent record from a KB event, or None (another event, an untrusted writer, bad data)."""
    if event_.get("type") != TYPE or event_.get("role") not in writers:
        return None
    body = event_.get("data")
    if body is None:  # written before events had data: the record is the message's JSON
        try:
            body = json.loads(event_.get("message") or "")
        except ValueError:
            return None
    if not isinstance(body, dict) or body.get("state") not in STATES:
        return None
    policy = body.get("policy")
    if not isinstance(policy, dict):
        policy = {}
    version = body.get("version")
    return {
        "id": event_.get("id", 0),
        "state": body["state"],
        "ts": float(event_.get("ts") or 0.0),
        "version": version if isinstance(version, int) and not isinstance(version, bool) else None,
        "policy": clean_policy(policy),
    }


def clean_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """Only well-formed policy fields (a malformed one is left to the controller's default)."""
    out: dict[str, Any] = {}
    if isinstance(policy.get("scorer"), str) and policy["scorer"]:
        out["scorer"] = policy["scorer"]
    hyst = policy.get("hysteresis")
    if isinstance(hyst, (int, float)) and not isinstance(hyst, bool) and 0 <= hyst < 1:
        out["hysteresis"] = float(hyst)
    exclude = policy.get("exclude")
    if isinstance(exclude, list) and all(isinstance(c, str) for c in exclude):
        out["exclude"] = sorted(exclude)
    return out


def records(events: list[dict[str, Any]], writers: tuple[str | None, ...] = WRITERS) -> list[dict[str, Any]]:
    """The trusted intent records among an application's events, oldest first."""
    found = [r for r in (parse(e, writers) for e in events) if r is not None]
    return sorted(found, key=lambda r: r["id"])


def stored_policy(events: list[dict[str, Any]], writers: tuple[str | None, ...] = WRITERS) -> dict[str, Any]:
    """The policy of the newest applied deploy ({} when the application has none recorded)."""
    applied = [r for r in records(events, writers) if r["state"] == APPLIED]
    return dict(applied[-1]["policy"]) if applied else {}


def recorded_policy(record: dict[str, Any] | None, read_events: Any) -> dict[str, Any]:
    """The policy of the application's newest applied deploy. The KB keeps it on the
    application's record (``policy``, written with the deploy's ``applied`` event), so no number
    of later events hides it; a record without one (none applied since the KB kept it there)
    falls back to the newest LOOKBACK events, which ``read_events()`` returns."""
    policy = (record or {}).get("policy")
    if isinstance(policy, dict):
        return clean_policy(policy)
    return stored_policy(read_events())


def worth_recording(
    kb: Any, app: str, params: dict[str, Any], new_version: bool, record: dict[str, Any] | None = None
) -> bool:
    """Whether a deploy records its intent: it stores a new spec version, or its policy is not
    the one recorded last (so an unchanged rerun writes no event). The KB keeps the last one on
    the application's ``record``; only a record from before it did costs a read of the events."""
    if new_version:
        return True
    kept = (record or {}).get("policy")
    if isinstance(kept, dict):
        return clean_policy(kept) != clean_policy(policy_of(params))
    events = kb.list_events(application=app, limit=LOOKBACK)
    # the deployer's own view: a KB without roles (a test double) counts as the deployer's
    return stored_policy(events, (*WRITERS, None)) != clean_policy(policy_of(params))


def newest(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = records(events)
    return found[-1] if found else None
