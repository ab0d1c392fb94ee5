"""The KB's writes, each a function of one connection run by the group-commit writer.

Each raises its HTTP error (404, 409) before writing anything, so the writer can go on with the
other writes of the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from fastapi import HTTPException

from qonnect.kb.models import EventIn, HistoryIn, PlacementIn, RollbackIn
from qonnect.kb.storage import Conn


def dumps(value: Any) -> str:
    """Canonical JSON: equal values give equal text (used for change detection too)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def not_found(kind: str, name: str) -> HTTPException:
    return HTTPException(404, f"{kind} {name!r} does not exist")


# -- clusters -----------------------------------------------------------------------------
_CLUSTER_FIELDS = (
    "tier",
    "location",
    "server",
    "kubeconfig",
    "context",
    "labels",
    "economics",
    "node_economics",
    "capacity",
)
_JSON_FIELDS = frozenset({"labels", "economics", "node_economics", "capacity"})
# a re-registration starts a new epoch: the next report is applied whatever its seq (a report
# "from the future" no longer silences the agent), and its node list sets a new capacity baseline
_NEW_EPOCH = (
    "report_seq = NULL, nodes_seq = NULL, workloads_seq = NULL, capacity_baseline = NULL, server_seq = NULL"
)


def _value(field: str, value: Any) -> Any:
    return dumps(_given(value)) if field in _JSON_FIELDS and value is not None else value


def _given(value: Any) -> Any:
    """A registered JSON value without its unset (null) parts: {"cpu": 64}, not {"cpu": 64,
    "memory": null, ...}."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items() if v is not None}
    return value


def _cluster_values(record: dict[str, Any]) -> list[Any]:
    return [_value(f, record.get(f)) for f in _CLUSTER_FIELDS]


def create_cluster(conn: Conn, record: dict[str, Any], now: float) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (record["name"],)):
        raise HTTPException(409, f"name: cluster {record['name']!r} is already registered")
    conn.execute(
        f"INSERT INTO clusters (name, {', '.join(_CLUSTER_FIELDS)}, created, updated)"
        f" VALUES ({', '.join('?' * (len(_CLUSTER_FIELDS) + 3))})",
        (record["name"], *_cluster_values(record), now, now),
    )


def put_cluster(conn: Conn, record: dict[str, Any], now: float) -> bool:
    """Create or replace the registration (agent state is kept, a new epoch of report sequence
    numbers starts); True if it was created."""
    if conn.one("SELECT 1 FROM clusters WHERE name = ?" + _for_update(conn), (record["name"],)) is None:
        create_cluster(conn, record, now)
        return True
    sets = ", ".join(f"{f} = ?" for f in _CLUSTER_FIELDS)
    conn.execute(
        f"UPDATE clusters SET {sets}, updated = ?, {_NEW_EPOCH} WHERE name = ?",
        (*_cluster_values(record), now, record["name"]),
    )
    conn.execute("UPDATE latencies SET seq = -1 WHERE cluster = ?", (record["name"],))
    return False


def patch_cluster(conn: Conn, name: str, changes: dict[str, Any], now: float) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (name,)) is None:
        raise not_found("cluster", name)
    sets = [f"{f} = ?" for f in _CLUSTER_FIELDS if f in changes]
    args = [_value(f, changes[f]) for f in _CLUSTER_FIELDS if f in changes]
    conn.execute(
        f"UPDATE clusters SET {', '.join([*sets, 'updated = ?'])} WHERE name = ?", (*args, now, name)
    )


def _for_update(conn: Conn) -> str:
    """A row lock on PostgreSQL (several KB instances may share the database); SQLite's write
    transactions are exclusive already."""
    return " ORDER BY name FOR UPDATE" if conn.dialect == "postgresql" else ""


REMOVALS_KEPT = 3600.0  # seconds a removal is remembered for the change feed (queries.changes)


def record_removal(conn: Conn, kind: str, name: str, now: float) -> None:
    """A tombstone for the change feed: ``kind`` (cluster, application) ``name`` is gone."""
    conn.execute("DELETE FROM removals WHERE ts < ?", (now - REMOVALS_KEPT,))
    conn.execute(
        "INSERT INTO removals (kind, name, ts) VALUES (?, ?, ?)"
        " ON CONFLICT (kind, name) DO UPDATE SET ts = excluded.ts",
        (kind, name, now),
    )


def delete_cluster(conn: Conn, name: str, now: float | None = None) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?" + _for_update(conn), (name,)) is None:
        raise not_found("cluster", name)
    for table in ("workloads", "latencies"):
        conn.execute(f"DELETE FROM {table} WHERE cluster = ?", (name,))
    conn.execute("DELETE FROM clusters WHERE name = ?", (name,))
    record_removal(conn, "cluster", name, time.time() if now is None else now)


# -- applications -------------------------------------------------------------------------
def put_application(
    conn: Conn,
    name: str,
    spec: dict[str, Any],
    normalized: dict[str, Any],
    now: float,
    rollback: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Store a new version unless the normalised spec equals the current one (``rollback``:
    what a rollback records on the version it stores)."""
    normalized_text = dumps(normalized)
    digest = _digest(normalized_text)
    conn.lock("application", name)
    row = conn.one("SELECT version, digest, created FROM applications WHERE name = ?", (name,))
    if row is not None and row[1] == digest:
        return {"version": row[0], "changed": False}
    version = 1 if row is None else row[0] + 1
    conn.execute(
        "INSERT INTO application_versions (name, version, spec, normalized, digest, created, rollback)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (name, version, dumps(spec), normalized_text, digest, now, dumps(rollback) if rollback else None),
    )
    if row is None:
        conn.execute(
            "INSERT INTO applications (name, version, digest, created, updated) VALUES (?, ?, ?, ?, ?)",
            (name, version, digest, now, now),
        )
    else:
        conn.execute(
            "UPDATE applications SET version = ?, digest = ?, updated = ? WHERE name = ?",
            (version, digest, now, name),
        )
    return {"version": version, "changed": True}


def roll_back_application(conn: Conn, name: str, body: RollbackIn, by: str, now: float) -> dict[str, Any]:
    """Store version ``restores``'s spec again as the newest version, if ``failing`` is still
    the current one (409 otherwise: a newer deploy wins, and a second rollback of the same
    failure changes nothing). Only a version a user stored can be restored, never a new spec;
    a controller's rollback is fenced like its placements."""
    failing, restores = body.failing, body.restores
    conn.lock("application", name)  # then the fence, in put_placement's order
    if body.fencing is not None:
        check_fence(conn, body.fencing.term, body.fencing.seq, "rollback")
    row = conn.one("SELECT version FROM applications WHERE name = ?", (name,))
    if row is None:
        raise not_found("application", name)
    if row[0] != failing:
        raise HTTPException(
            409,
            f"failing: {name} is at version {row[0]}, not {failing}; nothing rolled back (a newer "
            "version was stored, or this failure was already rolled back)",
        )
    if restores >= failing:
        raise HTTPException(422, f"restores: version {restores} is not older than the failing {failing}")
    old = conn.one(
        "SELECT spec, normalized FROM application_versions WHERE name = ? AND version = ?", (name, restores)
    )
    if old is None:
        raise not_found("version", f"{name}@{restores}")
    record = {"failing": failing, "restores": restores, "by": by, "reason": body.reason}
    result = put_application(conn, name, json.loads(old[0]), json.loads(old[1]), now, record)
    return {**result, "rollback": record}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def delete_application(conn: Conn, name: str, now: float | None = None) -> None:
    conn.lock("application", name)
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (name,)) is None:
        raise not_found("application", name)
    for table, col in (
        ("application_versions", "name"),
        ("history", "application"),
        ("placements", "application"),
        ("applications", "name"),
    ):
        conn.execute(f"DELETE FROM {table} WHERE {col} = ?", (name,))
    record_removal(conn, "application", name, time.time() if now is None else now)


# -- placements ---------------------------------------------------------------------------
def put_placement(conn: Conn, app: str, body: PlacementIn, now: float) -> None:
    """Write desired/current placement, fenced by the controller's (term, seq).

    An older token is a 409. One token writes one Binding's life: its intent (``desired``,
    before any cluster is touched), then either its completion (``current`` := that desired) or
    its retraction (``desired`` := the stored current); the same write again is a retry. Any
    other write under the same token is a 409 too: two writers holding one token is exactly what
    fencing excludes. The application's lock makes the compare-and-write atomic across KB
    instances.
    """
    conn.lock("application", app)
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (app,)) is None:
        raise not_found("application", app)
    row = conn.one("SELECT term, seq, desired, current FROM placements WHERE application = ?", (app,))
    term, seq = (row[0], row[1]) if row else (None, None)
    given = body.model_fields_set
    dumped = body.model_dump(exclude_none=True)
    values = {k: dumps(dumped[k]) if k in dumped else None for k in ("desired", "current") if k in given}
    fence = body.fencing
    if fence is not None:
        check_fence(conn, fence.term, fence.seq, "placement")
    if fence is not None and row is not None and term is not None:
        if (fence.term, fence.seq) < (term, seq):
            raise HTTPException(
                409,
                f"fencing: (term {fence.term}, seq {fence.seq}) is older than the stored "
                f"(term {term}, seq {seq}); a newer controller leader has written since",
            )
        if (fence.term, fence.seq) == (term, seq):
            stored = {"desired": row[2], "current": row[3]}
            if all(stored[k] == v for k, v in values.items()):
                return  # the same write again: nothing to change
            if not same_binding(stored, values):
                raise HTTPException(
                    409,
                    f"fencing: (term {term}, seq {seq}) was already used for a different "
                    "placement; each write needs a new fencing token",
                )
    if fence is not None:
        term, seq = fence.term, fence.seq
    if row is None:
        conn.execute(
            "INSERT INTO placements (application, desired, current, term, seq, updated)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (app, values.get("desired"), values.get("current"), term, seq, now),
        )
    else:
        sets = [f"{k} = ?" for k in values] + ["term = ?", "seq = ?", "updated = ?"]
        conn.execute(
            f"UPDATE placements SET {', '.join(sets)} WHERE application = ?",
            (*values.values(), term, seq, now, app),
        )


def same_binding(stored: Mapping[str, str | None], given: Mapping[Any, str | None]) -> bool:
    """Whether a second write under a token ends the Binding its first write began: completes
    it (current := the stored desired, desired unchanged) or retracts it (desired := the stored
    current, current unchanged). Values are the stored JSON texts (one dumps for both)."""
    desired, current = given.get("desired", stored["desired"]), given.get("current", stored["current"])
    completes = desired == stored["desired"] and current == stored["desired"]
    retracts = current == stored["current"] and desired == stored["current"]
    return stored["desired"] is not None and (completes or retracts)


def reset_fencing(conn: Conn, app: str, now: float) -> None:
    """Forget the stored fencing token (admin only): the next controller write sets it anew.

    The way out when a token was stored that no controller will ever exceed.
    """
    conn.lock("application", app)
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (app,)) is None:
        raise not_found("application", app)
    if conn.one("SELECT 1 FROM placements WHERE application = ?", (app,)) is None:
        raise not_found("placement of application", app)
    conn.execute(
        "UPDATE placements SET term = NULL, seq = NULL, updated = ? WHERE application = ?", (now, app)
    )


# -- the controller fence -----------------------------------------------------------------
FENCE = "controller"


def get_fence(conn: Conn) -> tuple[int, int, float | None]:
    """The newest fencing token a controller leader announced (0, 0 if none yet)."""
    row = conn.one("SELECT term, seq, updated FROM fences WHERE name = ?", (FENCE,))
    return (int(row[0]), int(row[1]), float(row[2])) if row else (0, 0, None)


def check_fence(conn: Conn, term: int, seq: int, what: str) -> None:
    """409 when (term, seq) is older than the fence: a newer leader exists, the writer is deposed.
    The fence is locked until the transaction ends, so no raise on another KB instance can slip
    between this check and the caller's write."""
    conn.lock("fence", FENCE)
    fterm, fseq, _updated = get_fence(conn)
    if (term, seq) < (fterm, fseq):
        raise HTTPException(
            409,
            f"fencing: {what} with (term {term}, seq {seq}) is older than the "
            f"controller fence (term {fterm}, seq {fseq}); a newer leader exists",
        )


def raise_fence(conn: Conn, term: int, seq: int, now: float) -> dict[str, Any]:
    """A new leader announces its token before it acts; never lowers the fence (409 instead)."""
    check_fence(conn, term, seq, "the new fence")
    conn.execute(
        "INSERT INTO fences (name, term, seq, updated) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET term = excluded.term, seq = excluded.seq,"
        " updated = excluded.updated WHERE (fences.term < excluded.term)"
        " OR (fences.term = excluded.term AND fences.seq < excluded.seq)",
        (FENCE, term, seq, now),
    )
    fterm, fseq, updated = get_fence(conn)
    return {"term": fterm, "seq": fseq, "updated": updated}


# -- events -------------------------------------------------------------------------------
def insert_event(conn: Conn, event: EventIn, now: float, role: str | None = None) -> dict[str, Any]:
    """Record an event with its author's role; a fenced event older than the fence is a 409."""
    ts = event.ts if event.ts is not None else now
    fence = event.fencing
    if fence is not None:
        check_fence(conn, fence.term, fence.seq, "event")
    ref = event.ref.model_dump() if event.ref is not None else None
    row = conn.one(
        "INSERT INTO events (ts, type, reason, message, application, cluster, role, ref,"
        " fence_term, fence_seq, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            ts,
            event.type,
            event.reason,
            event.message,
            event.application,
            event.cluster,
            role,
            dumps(ref) if ref is not None else None,
            fence.term if fence else None,
            fence.seq if fence else None,
            dumps(event.data) if event.data is not None else None,
        ),
    )
    if row is None:  # INSERT ... RETURNING yields one row
        raise RuntimeError("inserting an event returned no id")
    _record_policy(conn, event, role, now)
    return {
        "id": row[0],
        "ts": ts,
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "application": event.application,
        "cluster": event.cluster,
        "role": role,
        "ref": ref,
        "data": event.data,
        "fencing": {"term": fence.term, "seq": fence.seq} if fence else None,
    }


def _record_policy(conn: Conn, event: EventIn, role: str | None, now: float) -> None:
    """An admin's applied deploy: its placement policy becomes the application's (issue 38), in
    the event's transaction, so the controller reads it from the record, never by scanning the
    application's events (an application with many events lost its policy). ``updated`` moves,
    so the inventory's change feed carries the record to the controller."""
    if event.type != intent.TYPE or not event.application:
        return
    record = intent.parse(
        {"type": event.type, "role": role, "data": event.data, "message": event.message, "ts": now}
    )
    if record is None or record["state"] != intent.APPLIED:
        return
    conn.execute(
        "UPDATE applications SET policy = ?, updated = ? WHERE name = ?",
        (dumps(record["policy"]), now, event.application),
    )


# -- history of placement changes ---------------------------------------------------------
HISTORY_KEPT = 10_000  # rows kept per application (the oldest go first)


def record_history(conn: Conn, app: str, body: HistoryIn, by: str, now: float) -> int:
    """One history row per changed service, and the version's status: a succeeded change makes
    it ready on its clusters, a failed one failed where it failed. Fenced like placements."""
    conn.lock("application", app)
    if body.fencing is not None:
        check_fence(conn, body.fencing.term, body.fencing.seq, "history")
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (app,)) is None:
        raise not_found("application", app)
    for change in body.changes:
        conn.execute(
            "INSERT INTO history (application, version, service, from_clusters, to_clusters,"
            " trigger_kind, by_role, decision, outcome, detail, started, ended)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                app,
                body.version,
                change.service,
                dumps(sorted(set(change.from_clusters))),
                dumps(sorted(set(change.to_clusters))),
                body.trigger,
                by,
                body.decision,
                body.outcome,
                body.detail,
                body.started,
                max(body.started, body.ended),
            ),
        )
    conn.execute(  # ids are global: keep the application's newest HISTORY_KEPT rows
        "DELETE FROM history WHERE application = ? AND id <= (SELECT id FROM history"
        " WHERE application = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
        (app, app, HISTORY_KEPT),
    )
    if body.version is not None and body.outcome != "superseded":
        _mark_version(conn, app, body, now)
    return len(body.changes)


def _mark_version(conn: Conn, app: str, body: HistoryIn, now: float) -> None:
    """The version is ready where a succeeded change placed it, failed where it failed."""
    row = conn.one(
        "SELECT status FROM application_versions WHERE name = ? AND version = ?", (app, body.version)
    )
    if row is None:
        return  # a version since deleted with its application: nothing to mark
    status = json.loads(row[0]) if row[0] else {}
    ready, failed = set(status.get("ready") or ()), set(status.get("failed") or ())
    if body.outcome == "succeeded":
        placed = {c for change in body.changes for c in change.to_clusters}
        ready |= placed
        failed -= placed
    else:
        failed |= set(body.failed_on) or {c for change in body.changes for c in change.to_clusters}
        ready -= failed
    state = "ready" if ready else "failed" if failed or body.outcome == "failed" else "pending"
    conn.execute(
        "UPDATE application_versions SET status = ? WHERE name = ? AND version = ?",
        (
            dumps({"state": state, "ready": sorted(ready), "failed": sorted(failed), "updated": now}),
            app,
            body.version,
        ),
    )
