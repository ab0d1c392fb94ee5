"""The KB's writes, each a function of one connection run by the group-commit writer.

Each raises its HTTP error (404, 409) before writing anything, so the writer can go on with the
other writes of the same transaction.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi import HTTPException

from qonnect.kb.models import EventIn, NodeReport, PlacementIn, Report, WorkloadReport
from qonnect.kb.storage import Conn


def dumps(value: Any) -> str:
    """Canonical JSON: equal values give equal text (used for change detection too)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def not_found(kind: str, name: str) -> HTTPException:
    return HTTPException(404, f"{kind} {name!r} does not exist")


# -- clusters -----------------------------------------------------------------------------
_CLUSTER_FIELDS = ("tier", "location", "server", "kubeconfig", "context", "labels")


def _cluster_values(record: dict[str, Any]) -> list[Any]:
    return [dumps(record[f]) if f == "labels" else record.get(f) for f in _CLUSTER_FIELDS]


def create_cluster(conn: Conn, record: dict[str, Any], now: float) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (record["name"],)):
        raise HTTPException(409, f"name: cluster {record['name']!r} is already registered")
    conn.execute(
        "INSERT INTO clusters (name, tier, location, server, kubeconfig, context, labels,"
        " created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record["name"], *_cluster_values(record), now, now),
    )


def put_cluster(conn: Conn, record: dict[str, Any], now: float) -> bool:
    """Create or replace the registration (agent state is kept); True if it was created."""
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (record["name"],)) is None:
        create_cluster(conn, record, now)
        return True
    conn.execute(
        "UPDATE clusters SET tier = ?, location = ?, server = ?, kubeconfig = ?, context = ?,"
        " labels = ?, updated = ? WHERE name = ?",
        (*_cluster_values(record), now, record["name"]),
    )
    return False


def patch_cluster(conn: Conn, name: str, changes: dict[str, Any], now: float) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (name,)) is None:
        raise not_found("cluster", name)
    sets = [f"{f} = ?" for f in _CLUSTER_FIELDS if f in changes]
    args = [dumps(changes[f]) if f == "labels" else changes[f] for f in _CLUSTER_FIELDS if f in changes]
    conn.execute(
        f"UPDATE clusters SET {', '.join([*sets, 'updated = ?'])} WHERE name = ?", (*args, now, name)
    )


def delete_cluster(conn: Conn, name: str) -> None:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?" + _for_update(conn), (name,)) is None:
        raise not_found("cluster", name)
    for table in ("nodes", "workloads", "latencies"):
        conn.execute(f"DELETE FROM {table} WHERE cluster = ?", (name,))
    conn.execute("DELETE FROM clusters WHERE name = ?", (name,))


# -- agent reports ------------------------------------------------------------------------
_CHUNK = 300  # rows per multi-row statement (far below both databases' parameter limits)


def _for_update(conn: Conn) -> str:
    """Row locks on PostgreSQL, taken in one order (by name) by every KB instance, so two
    instances' batches touching the same clusters queue instead of deadlocking."""
    return " ORDER BY name FOR UPDATE" if conn.dialect == "postgresql" else ""


def _chunks(rows: list, size: int = _CHUNK) -> list[list]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def _newer(conn: Conn, column: str, extra: tuple[str, ...], rows: list[tuple]) -> set[str]:
    """For rows (cluster, seq, *extra values): set ``column`` = seq and the extra columns where
    seq is newer than the stored one; return the clusters that were updated."""
    width = 2 + len(extra)
    sets = ", ".join([f"{column} = v.column2", *(f"{c} = v.column{i + 3}" for i, c in enumerate(extra))])
    done: set[str] = set()
    for part in _chunks(rows):
        values = ", ".join(["(" + ", ".join("?" * width) + ")"] * len(part))
        done.update(
            r[0]
            for r in conn.all(
                f"UPDATE clusters SET {sets} FROM (VALUES {values}) AS v"
                f" WHERE clusters.name = v.column1"
                f" AND (clusters.{column} IS NULL OR clusters.{column} < v.column2)"
                " RETURNING clusters.name",
                [x for row in part for x in row],
            )
        )
    return done


def _insert(conn: Conn, table: str, columns: tuple[str, ...], rows: list[tuple], suffix: str = "") -> None:
    for part in _chunks(rows):
        values = ", ".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(part))
        conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}{suffix}",
            [x for row in part for x in row],
        )


def _replace_rows(
    conn: Conn, table: str, clusters: list[str], columns: tuple[str, ...], rows: list[tuple]
) -> None:
    for part in _chunks(clusters):
        conn.execute(f"DELETE FROM {table} WHERE cluster IN ({', '.join('?' * len(part))})", part)
    _insert(conn, table, columns, rows)


def apply_reports(conn: Conn, items: list[tuple[str, Report, float]]) -> list[Any]:
    """Merge agent reports (cluster, report, receive time): per key the highest seq wins.

    The cluster's heartbeat fields, its node list and its workload list each remember the seq
    that last set them and are replaced as a whole only by a newer report; latencies are kept
    per peer. Reports that arrive late, twice or out of order therefore change nothing, and a
    batch can be reduced to its newest value per key first and written with a few set-based
    statements. Returns, per item, its acknowledgement or an HTTPException (unknown cluster).
    """
    names = sorted({c for c, _rep, _now in items})
    known: set[str] = set()
    for part in _chunks(names):
        known.update(
            r[0]
            for r in conn.all(
                f"SELECT name FROM clusters WHERE name IN ({', '.join('?' * len(part))})" + _for_update(conn),
                part,
            )
        )
    beat: dict[str, tuple] = {}
    nodes: dict[str, tuple[int, float, list[NodeReport]]] = {}
    workloads: dict[str, tuple[int, list[WorkloadReport]]] = {}
    latencies: dict[tuple[str, str], tuple] = {}
    for cluster, rep, now in items:
        if cluster not in known:
            continue
        if cluster not in beat or rep.seq > beat[cluster][1]:
            beat[cluster] = (cluster, rep.seq, now, rep.ts, int(rep.reachable), rep.error)
        if rep.nodes is not None and (cluster not in nodes or rep.seq > nodes[cluster][0]):
            nodes[cluster] = (rep.seq, now, rep.nodes)
        if rep.workloads is not None and (cluster not in workloads or rep.seq > workloads[cluster][0]):
            workloads[cluster] = (rep.seq, rep.workloads)
        for peer, ms in rep.latencies.items():
            key = (cluster, peer)
            if key not in latencies or rep.seq > latencies[key][2]:
                latencies[key] = (cluster, peer, rep.seq, ms, now)
    newest = _newer(conn, "report_seq", ("heartbeat", "report_ts", "reachable", "error"), list(beat.values()))
    fresh = sorted(
        _newer(
            conn,
            "nodes_seq",
            ("nodes_received",),
            [(c, seq, now) for c, (seq, now, _nodes) in nodes.items()],
        )
    )
    _replace_rows(
        conn,
        "nodes",
        fresh,
        ("cluster", "name", "data"),
        [(c, n.name, n.model_dump_json()) for c in fresh for n in nodes[c][2]],
    )
    fresh = sorted(
        _newer(conn, "workloads_seq", (), [(c, seq) for c, (seq, _workloads) in workloads.items()])
    )
    _replace_rows(
        conn,
        "workloads",
        fresh,
        ("cluster", "namespace", "kind", "name", "application", "data"),
        [
            (c, w.namespace, w.kind, w.name, w.application, w.model_dump_json())
            for c in fresh
            for w in workloads[c][1]
        ],
    )
    _insert(
        conn,
        "latencies",
        ("cluster", "peer", "seq", "ms", "received"),
        sorted(latencies.values()),
        " ON CONFLICT (cluster, peer) DO UPDATE SET seq = excluded.seq, ms = excluded.ms,"
        " received = excluded.received WHERE excluded.seq > latencies.seq",
    )
    return [
        not_found("cluster", cluster)
        if cluster not in known
        else {"seq": rep.seq, "applied": cluster in newest and beat[cluster][1] == rep.seq}
        for cluster, rep, _now in items
    ]


# -- applications -------------------------------------------------------------------------
def put_application(
    conn: Conn, name: str, spec: dict[str, Any], normalized: dict[str, Any], now: float
) -> dict[str, Any]:
    """Store a new version unless the normalised spec equals the current one."""
    normalized_text = dumps(normalized)
    digest = _digest(normalized_text)
    conn.lock("application", name)
    row = conn.one("SELECT version, digest, created FROM applications WHERE name = ?", (name,))
    if row is not None and row[1] == digest:
        return {"version": row[0], "changed": False}
    version = 1 if row is None else row[0] + 1
    conn.execute(
        "INSERT INTO application_versions (name, version, spec, normalized, digest, created)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (name, version, dumps(spec), normalized_text, digest, now),
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


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def delete_application(conn: Conn, name: str) -> None:
    conn.lock("application", name)
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (name,)) is None:
        raise not_found("application", name)
    for table, col in (
        ("application_versions", "name"),
        ("placements", "application"),
        ("applications", "name"),
    ):
        conn.execute(f"DELETE FROM {table} WHERE {col} = ?", (name,))


# -- placements ---------------------------------------------------------------------------
def put_placement(conn: Conn, app: str, body: PlacementIn, now: float) -> None:
    """Write desired/current placement, fenced by the controller's (term, seq).

    An older token is a 409; the same token again is accepted only with the same content (a
    retry), otherwise 409 too: two writers holding one token is exactly what fencing excludes.
    The application's lock makes the compare-and-write atomic across KB instances.
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
            if any(stored[k] != v for k, v in values.items()):
                raise HTTPException(
                    409,
                    f"fencing: (term {term}, seq {seq}) was already used for a different "
                    "placement; each write needs a new fencing token",
                )
            return  # the same write again: nothing to change
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
        " fence_term, fence_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
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
        ),
    )
    if row is None:  # INSERT ... RETURNING yields one row
        raise RuntimeError("inserting an event returned no id")
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
        "fencing": {"term": fence.term, "seq": fence.seq} if fence else None,
    }
