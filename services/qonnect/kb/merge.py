"""Agent reports merged into the KB: per key the report with the highest seq wins.

The cluster's heartbeat fields, its node list (a JSON array in its row) and its workload list
each remember the seq that last set them and are replaced as a whole only by a newer report;
latencies are kept per peer; the API server's version and group-versions (sent every few
minutes) remember their own seq too.
Reports that arrive late, twice or out of order therefore change nothing, so the group writer's
batch is first reduced in Python to the newest value per key (``_reduce``) and then written with
set-based statements.

The statements differ per database, and a differential test holds them to the same result. On
SQLite (one process, a few thousand reports per second) they are plain ``UPDATE ... FROM
(VALUES ...)`` statements. On PostgreSQL, where several KB instances may write at 5,000 reports
per second, the whole batch is one JSON parameter and one statement (data-modifying ``WITH``
parts): the fixed cost per statement and round trip, in psycopg and in the server, dominated
batches of a few dozen reports, and a ``VALUES`` list of varying length was parsed and planned
anew for every batch, where this text never changes and runs as a prepared statement.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from qonnect.kb import trust
from qonnect.kb.models import ECONOMIC_FIELDS, NodeReport, Report, ServerReport, WorkloadReport
from qonnect.kb.ops import not_found
from qonnect.kb.storage import Conn

CHUNK = 300  # SQLite rows per statement (far below its parameter limit)
ONE_STATEMENT = frozenset({"postgresql"})  # databases on which apply_reports runs one statement


@dataclass
class _Newest:
    """A batch reduced to the newest value per key, for the clusters that exist."""

    beat: dict[str, tuple] = field(default_factory=dict)  # cluster, seq, now, ts, reachable, error
    nodes: dict[str, tuple[int, float, list[NodeReport]]] = field(default_factory=dict)  # seq, now, nodes
    workloads: dict[str, tuple[int, list[WorkloadReport], float]] = field(default_factory=dict)  # seq, ., now
    latencies: dict[tuple[str, str], tuple] = field(default_factory=dict)  # cluster, peer, seq, ms, now
    server: dict[str, tuple[int, ServerReport]] = field(default_factory=dict)  # seq, what it said


Bounds = dict[str, tuple[dict | None, dict | None]]  # cluster -> (capacity baseline, registered capacity)


class ReportMerger:
    """``apply_reports`` remembering each cluster's capacity bounds between batches.

    On PostgreSQL the batch's statement returns the bounds it found, so a steady stream of
    reports stays one statement per batch; only a cluster not seen yet, or a report the
    remembered bounds would refuse, costs a read. A re-registration through another KB instance
    that lowers the bounds is therefore applied one batch late; one that raises them at once.
    """

    def __init__(self) -> None:
        self.bounds: Bounds = {}

    def __call__(self, conn: Conn, items: list[tuple[str, Report, float]]) -> list[Any]:
        return apply_reports(conn, items, self.bounds)


def apply_reports(
    conn: Conn,
    items: list[tuple[str, Report, float]],
    cache: Bounds | None = None,
    stamp: float | None = None,
) -> list[Any]:
    """Merge agent reports (cluster, report, receive time). Returns, per item, its
    acknowledgement or an HTTPException (422: beyond the bounds of trust.py; 404: unknown
    cluster). ``cache``: bounds remembered from earlier batches (PostgreSQL only). ``stamp``:
    the KB time a cluster this batch changes materially is marked ``changed`` at (default now)."""
    stamp = time.time() if stamp is None else stamp
    refused: dict[int, HTTPException] = {}
    for i, (_cluster, rep, now) in enumerate(items):
        problem = trust.report_problem(rep, now)
        if problem:
            refused[i] = HTTPException(422, problem)
    bounds = _batch_bounds(
        conn, sorted({c for i, (c, _r, _n) in enumerate(items) if i not in refused}), cache
    )
    _refuse_implausible(conn, items, bounds, refused, cache)
    accepted = [item for i, item in enumerate(items) if i not in refused]
    postgresql = conn.dialect == "postgresql"
    known = set(bounds)
    newest = _reduce(accepted, None if postgresql else known)
    baselines = {  # the first non-empty node list of an epoch sets its capacity baseline
        cluster: base
        for cluster, (_seq, _now, nodes) in newest.nodes.items()
        if bounds.get(cluster, (None, None))[0] is None and (base := trust.baseline_of(nodes)) is not None
    }
    if postgresql:
        known, stored, found = _write_postgresql(conn, newest, baselines, stamp)
        if cache is not None:
            for cluster in newest.beat.keys() - found.keys():
                cache.pop(cluster, None)  # deregistered
            cache.update(found)
    else:
        stored = _write_sqlite(conn, newest, baselines, stamp)
    _write_server(conn, newest.server, known, stamp)
    return [
        refused[i]
        if i in refused
        else not_found("cluster", cluster)
        if cluster not in known
        else {"seq": rep.seq, "applied": cluster in stored and newest.beat[cluster][1] == rep.seq}
        for i, (cluster, rep, _now) in enumerate(items)
    ]


def _refuse_implausible(
    conn: Conn,
    items: list[tuple[str, Report, float]],
    bounds: Bounds,
    refused: dict[int, HTTPException],
    cache: Bounds | None,
) -> None:
    """Add the reports whose node lists claim implausible capacity to ``refused``."""
    reread: set[str] = set()
    for i, (cluster, rep, _now) in enumerate(items):
        if i in refused or rep.nodes is None or cluster not in bounds:
            continue
        problem = trust.capacity_problem(rep.nodes, *bounds[cluster])
        if problem and cache is not None and cluster not in reread:
            # remembered bounds may predate a re-registration: refuse only by the stored ones
            reread.add(cluster)
            fresh = _bounds(conn, [cluster])
            cache.pop(cluster, None)
            cache.update(fresh)
            bounds[cluster] = fresh.get(cluster, (None, None))
            problem = trust.capacity_problem(rep.nodes, *bounds[cluster])
        if problem:
            refused[i] = HTTPException(422, problem)


def _batch_bounds(conn: Conn, names: list[str], cache: Bounds | None) -> Bounds:
    """The bounds of the batch's clusters that exist (as far as known, on PostgreSQL)."""
    if conn.dialect != "postgresql" or cache is None:
        return _bounds(conn, names)
    missing = [name for name in names if name not in cache]
    if missing:
        cache.update(_bounds(conn, missing))
    return {name: cache[name] for name in names if name in cache}


def _reduce(items: list[tuple[str, Report, float]], known: set[str] | None) -> _Newest:
    """The newest value per key of the reports (of the ``known`` clusters, if given)."""
    out = _Newest()
    for cluster, rep, now in items:
        if known is not None and cluster not in known:
            continue
        if cluster not in out.beat or rep.seq > out.beat[cluster][1]:
            out.beat[cluster] = (cluster, rep.seq, now, rep.ts, int(rep.reachable), rep.error)
        if rep.nodes is not None and (cluster not in out.nodes or rep.seq > out.nodes[cluster][0]):
            out.nodes[cluster] = (rep.seq, now, rep.nodes)
        if rep.workloads is not None and (
            cluster not in out.workloads or rep.seq > out.workloads[cluster][0]
        ):
            out.workloads[cluster] = (rep.seq, rep.workloads, now)
        for peer, ms in rep.latencies.items():
            key = (cluster, peer)
            if key not in out.latencies or rep.seq > out.latencies[key][2]:
                out.latencies[key] = (cluster, peer, rep.seq, ms, now)
        if rep.server is not None and (cluster not in out.server or rep.seq > out.server[cluster][0]):
            out.server[cluster] = (rep.seq, rep.server)
    return out


def _write_server(
    conn: Conn, server: dict[str, tuple[int, ServerReport]], known: set[str], stamp: float
) -> None:
    """A cluster's API server version and group-versions, newest by seq. Agents send them on
    (re)connect and every few minutes, so they take a statement of their own (the same on both
    databases) and leave the per-report statements as they are; a different value is a material
    change (``changed``, the change feed)."""
    rows: list[Sequence[Any]] = []
    for cluster, (seq, found) in sorted(server.items()):
        if cluster in known:
            apis = json.dumps(sorted(set(found.api_versions)))
            rows.append((found.kube_version, apis, stamp, found.kube_version, apis, seq, cluster, seq))
    conn.executemany(
        "UPDATE clusters SET changed = CASE WHEN coalesce(kube_version, '') <> ?"
        " OR coalesce(api_versions, '') <> ? THEN ? ELSE changed END,"
        " kube_version = ?, api_versions = ?, server_seq = ?"
        " WHERE name = ? AND (server_seq IS NULL OR server_seq < ?)",
        rows,
    )


def _chunks(rows: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _bounds(conn: Conn, names: list[str]) -> Bounds:
    """The clusters that exist: their capacity baseline and registered capacity.

    On PostgreSQL a read before the batch's statement: a baseline is set once per epoch and
    only ever cleared by a re-registration, so a batch racing one is judged by the old epoch's
    bounds at worst."""
    if conn.dialect == "postgresql":
        rows = conn.all(
            "SELECT name, capacity_baseline, capacity FROM clusters WHERE name = ANY(?)", (names,)
        )
    else:
        rows = [
            row
            for part in _chunks(names)
            for row in conn.all(
                "SELECT name, capacity_baseline, capacity FROM clusters"
                f" WHERE name IN ({', '.join('?' * len(part))})",
                part,
            )
        ]
    return {name: (_loads(base), _loads(capacity)) for name, base, capacity in rows}


def _loads(text: str | None) -> dict | None:
    return json.loads(text) if text else None


def nodes_json(nodes: list[NodeReport]) -> str:
    """A cluster's nodes as stored in its row: one JSON array, sorted by node name.

    In the cluster's row rather than a row per node: a report replaces the whole list anyway,
    and on PostgreSQL the node rows (delete the missing, upsert the others) were a fifth of the
    database's CPU per report (0.063 -> 0.051 ms in benchmarks/kb.py). Without the economics a
    report may carry: the registration owns those (trust.py)."""
    return (
        "["
        + ",".join(
            n.model_dump_json(exclude=set(ECONOMIC_FIELDS)) for n in sorted(nodes, key=lambda n: n.name)
        )
        + "]"
    )


def digest(text: str) -> str:
    """A short digest of a stored node or workload list: a report compares digests, not lists,
    to tell whether it changed the cluster (the change feed, queries.changes)."""
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _workload_rows(workloads: list[WorkloadReport]) -> tuple[list[tuple[WorkloadReport, str]], str]:
    """Each workload with its stored JSON, and the digest of the list (in key order)."""
    rows = [(w, w.model_dump_json()) for w in workloads]
    keyed = sorted((w.namespace, w.kind, w.name, text) for w, text in rows)
    return rows, digest("\n".join(k[3] for k in keyed))


def _json(value: Any) -> str:
    # validated models' fields only: finite numbers, text without NUL or unpaired surrogates
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


# -- PostgreSQL: one statement --------------------------------------------------------------
_POSTGRESQL = """
WITH batch AS (SELECT ?::jsonb AS j),
incoming AS (
    SELECT (e->>0)::text AS name, (e->>1)::int8 AS seq, (e->>2)::float8 AS heartbeat,
           (e->>3)::float8 AS report_ts, (e->>4)::int4 AS reachable, e->>5 AS error,
           (e->>6)::int8 AS nodes_seq, (e->>7)::float8 AS nodes_received, e->>8 AS nodes_json,
           (e->>9)::int8 AS workloads_seq, e->>10 AS baseline, e->>11 AS nodes_digest,
           e->>12 AS workloads_digest, (e->>13)::float8 AS stamp
    FROM batch, jsonb_array_elements(batch.j->'clusters') AS e
),
locked AS MATERIALIZED (
    -- the batch's clusters that exist, locked in one order (by name) in every KB instance, so
    -- two instances' batches queue instead of deadlocking; a row another instance changed
    -- meanwhile is read as it is now (READ COMMITTED re-reads a row it had to wait for)
    SELECT name, report_seq, nodes_seq, workloads_seq, capacity_baseline, capacity FROM clusters
    WHERE name = ANY(ARRAY(SELECT name FROM incoming))
    ORDER BY name FOR UPDATE
),
newer AS (
    SELECT i.*,
           (o.report_seq IS NULL OR o.report_seq < i.seq) AS beat,
           (i.nodes_seq IS NOT NULL AND (o.nodes_seq IS NULL OR o.nodes_seq < i.nodes_seq)) AS nodes,
           (i.workloads_seq IS NOT NULL AND (o.workloads_seq IS NULL OR o.workloads_seq < i.workloads_seq))
               AS workloads
    FROM incoming i JOIN locked o ON o.name = i.name
),
updated AS (
    UPDATE clusters c SET
        report_seq = CASE WHEN n.beat THEN n.seq ELSE c.report_seq END,
        heartbeat = CASE WHEN n.beat THEN n.heartbeat ELSE c.heartbeat END,
        report_ts = CASE WHEN n.beat THEN n.report_ts ELSE c.report_ts END,
        reachable = CASE WHEN n.beat THEN n.reachable ELSE c.reachable END,
        error = CASE WHEN n.beat THEN n.error ELSE c.error END,
        nodes_seq = CASE WHEN n.nodes THEN n.nodes_seq ELSE c.nodes_seq END,
        nodes_received = CASE WHEN n.nodes THEN n.nodes_received ELSE c.nodes_received END,
        nodes = CASE WHEN n.nodes THEN n.nodes_json ELSE c.nodes END,
        workloads_seq = CASE WHEN n.workloads THEN n.workloads_seq ELSE c.workloads_seq END,
        capacity_baseline = CASE WHEN n.nodes THEN coalesce(c.capacity_baseline, n.baseline)
                                 ELSE c.capacity_baseline END,
        nodes_digest = CASE WHEN n.nodes THEN n.nodes_digest ELSE c.nodes_digest END,
        workloads_digest = CASE WHEN n.workloads THEN n.workloads_digest ELSE c.workloads_digest END,
        -- a material change (not a heartbeat alone): reachability, error, nodes or workloads
        -- (stamped with the KB's time of this write, so a reader's cursor misses it only if the
        -- write commits more than the feed's overlap after it, routes/system.py OVERLAP)
        changed = CASE WHEN (n.beat AND (c.heartbeat IS NULL OR c.reachable IS DISTINCT FROM n.reachable
                                         OR c.error IS DISTINCT FROM n.error))
                            OR (n.nodes AND c.nodes_digest IS DISTINCT FROM n.nodes_digest)
                            OR (n.workloads AND c.workloads_digest IS DISTINCT FROM n.workloads_digest)
                       THEN greatest(c.changed, n.stamp) ELSE c.changed END
    FROM newer n
    WHERE c.name = n.name AND (n.beat OR n.nodes OR n.workloads)
    RETURNING c.name, n.beat, n.workloads, c.capacity_baseline
),
workload_rows AS (
    SELECT e->>0 AS cluster, e->>1 AS namespace, e->>2 AS kind, e->>3 AS name, e->>4 AS application,
           e->>5 AS data
    FROM batch, jsonb_array_elements(batch.j->'workloads') AS e
),
gone_workloads AS (
    DELETE FROM workloads d
    WHERE d.cluster = ANY(ARRAY(SELECT name FROM updated WHERE workloads))
      AND NOT EXISTS (
          SELECT 1 FROM workload_rows r
          WHERE r.cluster = d.cluster AND r.namespace = d.namespace AND r.kind = d.kind AND r.name = d.name
      )
),
put_workloads AS (
    INSERT INTO workloads (cluster, namespace, kind, name, application, data)
    SELECT r.cluster, r.namespace, r.kind, r.name, r.application, r.data
    FROM workload_rows r JOIN updated u ON u.name = r.cluster AND u.workloads
    ON CONFLICT (cluster, namespace, kind, name)
    DO UPDATE SET application = excluded.application, data = excluded.data
),
put_latencies AS (
    INSERT INTO latencies (cluster, peer, seq, ms, received)
    SELECT e->>0, e->>1, (e->>2)::int8, (e->>3)::float8, (e->>4)::float8
    FROM batch, jsonb_array_elements(batch.j->'latencies') AS e JOIN locked o ON o.name = e->>0
    ON CONFLICT (cluster, peer) DO UPDATE SET seq = excluded.seq, ms = excluded.ms, received = excluded.received
    WHERE excluded.seq > latencies.seq
)
SELECT o.name, coalesce(u.beat, false), coalesce(u.capacity_baseline, o.capacity_baseline), o.capacity
FROM locked o LEFT JOIN updated u ON u.name = o.name
"""


def _write_postgresql(
    conn: Conn, newest: _Newest, baselines: dict[str, dict[str, float]], stamp: float
) -> tuple[set[str], set[str], Bounds]:
    """Write the batch with one statement: the clusters that exist, those whose heartbeat it
    stored, and their bounds as they are now."""
    clusters = []
    workload_rows: list[list[Any]] = []
    for cluster, row in newest.beat.items():
        nodes = newest.nodes.get(cluster)
        workloads = newest.workloads.get(cluster)
        nodes_text = nodes_json(nodes[2]) if nodes else None
        workloads_digest = None
        if workloads:
            dumped, workloads_digest = _workload_rows(workloads[1])
            workload_rows += [[cluster, w.namespace, w.kind, w.name, w.application, t] for w, t in dumped]
        clusters.append(
            [
                *row,
                nodes[0] if nodes else None,
                nodes[1] if nodes else None,
                nodes_text,
                workloads[0] if workloads else None,
                _json(baselines[cluster]) if cluster in baselines else None,
                digest(nodes_text) if nodes_text is not None else None,
                workloads_digest,
                stamp,
            ]
        )
    batch = {
        "clusters": clusters,
        "workloads": workload_rows,
        "latencies": sorted(newest.latencies.values()),
    }
    rows = conn.all(_POSTGRESQL, (_json(batch),))
    found = {r[0]: (_loads(r[2]), _loads(r[3])) for r in rows}
    return set(found), {r[0] for r in rows if r[1]}, found


# -- SQLite: a few statements ---------------------------------------------------------------
def _values(width: int, rows: Sequence[tuple]) -> Iterator[tuple[str, list]]:
    row = "(" + ", ".join("?" * width) + ")"
    for part in _chunks(rows):
        yield f"(VALUES {', '.join([row] * len(part))}) AS v", [x for r in part for x in r]


def _newer(
    conn: Conn,
    column: str,
    extra: tuple[str, ...],
    rows: list[tuple],
    changed: tuple[str, int] | None = None,
) -> set[str]:
    """For rows (cluster, seq, *extra values[, stamp]): set ``column`` = seq and the extra columns
    where seq is newer than the stored one; return the clusters that were updated. ``changed``:
    (condition on the old row ``clusters`` and the new one ``v``, column number of the receive
    time) that makes the row's ``changed`` that time."""
    parts = [f"{column} = v.column2", *(f"{c} = v.column{i + 3}" for i, c in enumerate(extra))]
    if changed is not None:
        condition, stamp = changed
        parts.append(
            f"changed = CASE WHEN {condition} THEN max(v.column{stamp}, coalesce(clusters.changed, 0))"
            " ELSE clusters.changed END"
        )
    sets = ", ".join(parts)
    width = len(rows[0]) if rows else 2 + len(extra)
    done: set[str] = set()
    for source, params in _values(width, rows):
        done.update(
            r[0]
            for r in conn.all(
                f"UPDATE clusters SET {sets} FROM {source} WHERE clusters.name = v.column1"
                f" AND (clusters.{column} IS NULL OR clusters.{column} < v.column2) RETURNING clusters.name",
                params,
            )
        )
    return done


def _insert(conn: Conn, table: str, columns: tuple[str, ...], rows: list[tuple], suffix: str = "") -> None:
    for source, params in _values(len(columns), rows):
        # WHERE true: SQLite needs it before ON CONFLICT to parse INSERT ... SELECT
        conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM {source} WHERE true{suffix}", params
        )


def _replace_rows(
    conn: Conn, table: str, clusters: list[str], columns: tuple[str, ...], rows: list[tuple]
) -> None:
    for part in _chunks(clusters):
        conn.execute(f"DELETE FROM {table} WHERE cluster IN ({', '.join('?' * len(part))})", list(part))
    _insert(conn, table, columns, rows)


def _write_sqlite(
    conn: Conn, newest: _Newest, baselines: dict[str, dict[str, float]], stamp: float
) -> set[str]:
    """Write the batch; the clusters whose heartbeat it stored."""
    stored = _newer(
        conn,
        "report_seq",
        ("heartbeat", "report_ts", "reachable", "error"),
        [(*row, stamp) for row in newest.beat.values()],
        (
            "clusters.heartbeat IS NULL OR clusters.reachable IS NOT v.column5"
            " OR clusters.error IS NOT v.column6",
            7,
        ),
    )
    nodes = newest.nodes
    node_rows = []
    for c, (s, t, n) in nodes.items():
        text = nodes_json(n)
        node_rows.append((c, s, t, text, digest(text), stamp))
    fresh_nodes = _newer(
        conn,
        "nodes_seq",
        ("nodes_received", "nodes", "nodes_digest"),
        node_rows,
        ("clusters.nodes_digest IS NOT v.column5", 6),
    )
    for cluster in sorted(fresh_nodes & baselines.keys()):  # once per epoch
        conn.execute(
            "UPDATE clusters SET capacity_baseline = ? WHERE name = ? AND capacity_baseline IS NULL",
            (_json(baselines[cluster]), cluster),
        )
    workloads = newest.workloads
    dumped = {c: _workload_rows(ws) for c, (_s, ws, _t) in workloads.items()}
    fresh = sorted(
        _newer(
            conn,
            "workloads_seq",
            ("workloads_digest",),
            [(c, s, dumped[c][1], stamp) for c, (s, _w, _t) in workloads.items()],
            ("clusters.workloads_digest IS NOT v.column3", 4),
        )
    )
    _replace_rows(
        conn,
        "workloads",
        fresh,
        ("cluster", "namespace", "kind", "name", "application", "data"),
        [(c, w.namespace, w.kind, w.name, w.application, text) for c in fresh for w, text in dumped[c][0]],
    )
    _insert(
        conn,
        "latencies",
        ("cluster", "peer", "seq", "ms", "received"),
        sorted(newest.latencies.values()),
        " ON CONFLICT (cluster, peer) DO UPDATE SET seq = excluded.seq, ms = excluded.ms,"
        " received = excluded.received WHERE excluded.seq > latencies.seq",
    )
    return stored
