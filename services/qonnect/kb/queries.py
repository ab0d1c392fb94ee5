"""The KB's reads: rows to the JSON shapes of the API and of the inventory contract.

Ages and health are computed here, at read time, from the KB's own receive timestamps.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    aged_cluster,
    credentials_broken,
    current_placement,
    free_capacity,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    latency_matrix as model_latency_matrix,
)
from fastapi import HTTPException

from qonnect.kb.jsonsafe import storable_problems
from qonnect.kb.ops import not_found
from qonnect.kb.storage import Conn

log = logging.getLogger(__name__)

_CLUSTER_COLS = (
    "name, tier, location, server, kubeconfig, context, labels, created, updated,"
    " report_seq, heartbeat, reachable, error, economics, node_economics, capacity"
)
ECONOMICS = ("price_eur_h", "energy_kwh", "bandwidth_gbps")


def age(now: float, then: float | None) -> float | None:
    return None if then is None else round(max(0.0, now - then), 3)


def healthy(now: float, heartbeat: float | None, reachable: int | None, timeout: float) -> bool:
    return heartbeat is not None and now - heartbeat <= timeout and reachable != 0


def _cluster(row: tuple, now: float, timeout: float, credentials: bool) -> dict[str, Any]:
    (
        name,
        tier,
        location,
        server,
        kubeconfig,
        context,
        labels,
        created,
        updated,
        seq,
        heartbeat,
        reachable,
        error,
        economics,
        node_economics,
        capacity,
    ) = row
    out: dict[str, Any] = {
        "name": name,
        "tier": tier,
        "location": location,
        "server": server,
        "labels": json.loads(labels),
        "created": created,
        "updated": updated,
        "status": {
            "seq": seq,
            "heartbeat_age": age(now, heartbeat),
            "healthy": healthy(now, heartbeat, reachable, timeout),
            "reachable": None if reachable is None else bool(reachable),
            "error": error,
        },
    }
    if credentials:
        out["kubeconfig"] = kubeconfig
        out["context"] = context
    # the registered facts, shown only when registered (older clients compare whole records)
    for key, text in (("economics", economics), ("node_economics", node_economics), ("capacity", capacity)):
        value = json.loads(text) if text else None
        if value:
            out[key] = value
    return out


def list_clusters(conn: Conn, now: float, timeout: float, credentials: bool) -> list[dict]:
    rows = conn.all(f"SELECT {_CLUSTER_COLS} FROM clusters ORDER BY name")
    return [_cluster(r, now, timeout, credentials) for r in rows]


def get_cluster(conn: Conn, name: str, now: float, timeout: float, credentials: bool) -> dict:
    row = conn.one(f"SELECT {_CLUSTER_COLS} FROM clusters WHERE name = ?", (name,))
    if row is None:
        raise not_found("cluster", name)
    return _cluster(row, now, timeout, credentials)


def _nodes_by_cluster(conn: Conn, now: float, cluster: str | None = None) -> dict[str, list]:
    """The stored nodes with the registered economics laid over them (reports' are dropped)."""
    sql = (
        "SELECT name, nodes, nodes_received, economics, node_economics FROM clusters WHERE nodes IS NOT NULL"
    )
    args: tuple = ()
    if cluster is not None:
        sql += " AND name = ?"
        args = (cluster,)
    out: dict[str, list] = {}
    for name, data, received, economics, node_economics in conn.all(sql, args):
        out[name] = stored_nodes(data, received, economics, node_economics, now)
    return out


def stored_nodes(
    data: str, received: float | None, economics: str | None, node_economics: str | None, now: float
) -> list[dict[str, Any]]:
    """A cluster's stored node list with the registered economics laid over it (a report's own
    are never kept) and each node's age by the KB's clock."""
    default = json.loads(economics) if economics else {}
    per_node = json.loads(node_economics) if node_economics else {}
    unlisted = _unlisted_node_economics(per_node)
    nodes = json.loads(data)
    for node in nodes:
        own = per_node.get(node["name"]) or {}
        for key in ECONOMICS:  # never a reported value (rows stored before migration 6 hold some)
            value = own[key] if own.get(key) is not None else default.get(key, unlisted.get(key))
            if value is None:
                node.pop(key, None)
            else:
                node[key] = value
        node["heartbeat_age"] = age(now, received)
    return nodes


def _unlisted_node_economics(per_node: dict[str, Any]) -> dict[str, float]:
    """Economics of a reported node the registration does not name, when the cluster has no
    default: its least favourable registered node's (highest price and energy, lowest
    bandwidth), so a node an agent invents never attracts work by being cheap or green."""
    out: dict[str, float] = {}
    for key, worst in (("price_eur_h", max), ("energy_kwh", max), ("bandwidth_gbps", min)):
        values = [e[key] for e in per_node.values() if isinstance(e, dict) and e.get(key) is not None]
        if values:
            out[key] = worst(values)
    return out


def list_nodes(conn: Conn, cluster: str, now: float) -> list[dict]:
    if conn.one("SELECT 1 FROM clusters WHERE name = ?", (cluster,)) is None:
        raise not_found("cluster", cluster)
    return _nodes_by_cluster(conn, now, cluster).get(cluster, [])


def list_workloads(conn: Conn, application: str | None, cluster: str | None) -> list[dict]:
    sql = "SELECT cluster, data FROM workloads"
    where, args = [], []
    if application is not None:
        where.append("application = ?")
        args.append(application)
    if cluster is not None:
        where.append("cluster = ?")
        args.append(cluster)
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.all(sql + " ORDER BY cluster, namespace, kind, name", args)
    return [{"cluster": c, **json.loads(d)} for c, d in rows]


def latency_matrix(conn: Conn) -> dict[str, dict[str, float]]:
    """latency_ms[a][b]: location a to location b; peers named by cluster map to its location.

    A round trip is one path seen from both of its ends, so a pair's value is the largest that
    any agent at either end measured (issue 25): one agent's token can make its own paths look
    slower than its peers measure them, never faster (a forged 0 ms attracts nothing while the
    peer's agent measures the path). A path measured from one end only keeps that end's value."""
    locations = dict(conn.all("SELECT name, location FROM clusters"))
    return model_latency_matrix(
        conn.all("SELECT cluster, peer, ms FROM latencies ORDER BY cluster, peer"), locations
    )


# -- applications -------------------------------------------------------------------------
_APP_SQL = (
    "SELECT a.name, a.version, v.spec, v.normalized, a.created, a.updated, a.policy FROM applications a"
    " JOIN application_versions v ON v.name = a.name AND v.version = a.version"
)


def _application(row: tuple) -> dict[str, Any]:
    name, version, spec, normalized, created, updated, policy = row
    return {
        "name": name,
        "version": version,
        "spec": json.loads(spec),
        "application": json.loads(normalized),
        "created": created,
        "updated": updated,
        "policy": json.loads(policy) if policy else None,
    }


def _unservable(name: str, version: int, record: dict[str, Any]) -> str | None:
    """Why a stored record (written before the KB refused such specs) cannot be answered."""
    problems = storable_problems(record)
    if not problems:
        return None
    log.warning(
        "application %r version %s cannot be served and is left out: %s", name, version, "; ".join(problems)
    )
    return "; ".join(problems)


def _poisoned(name: str, why: str) -> HTTPException:
    return HTTPException(
        409,
        f"application {name!r}: the stored spec cannot be served ({why}); "
        "PUT a valid spec or DELETE the application",
    )


def list_applications(conn: Conn) -> list[dict]:
    """Every application that can be served; one poisoned record never hides the others."""
    out = []
    for row in conn.all(_APP_SQL + " ORDER BY a.name"):
        try:
            record = _application(row)
        except (ValueError, RecursionError) as exc:
            log.warning("application %r cannot be decoded and is left out: %s", row[0], exc)
            continue
        if _unservable(row[0], row[1], record) is None:
            out.append(record)
    return out


def get_application(conn: Conn, name: str, version: int | None = None) -> dict:
    """The current version, or the given one (with the application's created/updated)."""
    if version is None:
        row = conn.one(_APP_SQL + " WHERE a.name = ?", (name,))
    else:
        row = conn.one(
            "SELECT a.name, v.version, v.spec, v.normalized, a.created, a.updated, a.policy"
            " FROM applications a JOIN application_versions v ON v.name = a.name"
            " WHERE a.name = ? AND v.version = ?",
            (name, version),
        )
    if row is None:
        raise not_found("application", name)
    try:
        record = _application(row)
    except (ValueError, RecursionError) as exc:
        raise _poisoned(name, type(exc).__name__) from None
    why = _unservable(name, row[1], record)
    if why:
        raise _poisoned(name, why)
    return record


def list_versions(conn: Conn, name: str, version: int | None = None) -> list[dict]:
    sql = (
        "SELECT version, created, spec, normalized, rollback, status FROM application_versions WHERE name = ?"
    )
    args: list[Any] = [name]
    if version is not None:
        sql += " AND version = ?"
        args.append(version)
    rows = conn.all(sql + " ORDER BY version", args)
    if not rows and conn.one("SELECT 1 FROM applications WHERE name = ?", (name,)) is None:
        raise not_found("application", name)
    if not rows:
        raise not_found("version", f"{name}@{version}")
    out = []
    for v, c, s, n, rb, st in rows:
        try:
            record = {"version": v, "created": c, "spec": json.loads(s), "application": json.loads(n)}
            if rb:
                record["rollback"] = json.loads(rb)
            record["status"] = json.loads(st) if st else dict(PENDING)
        except (ValueError, RecursionError) as exc:
            raise _poisoned(name, type(exc).__name__) from None
        why = _unservable(name, v, record)
        if why is None:
            out.append(record)
        elif version is not None:
            raise _poisoned(name, why)
    return out


PENDING: dict[str, Any] = {"state": "pending", "ready": [], "failed": [], "updated": None}


def list_history(conn: Conn, name: str, limit: int, before: int | None = None) -> dict[str, Any]:
    """An application's placement changes, newest first, ``limit`` at a time (``before``: the
    previous page's ``next``)."""
    if conn.one("SELECT 1 FROM applications WHERE name = ?", (name,)) is None:
        raise not_found("application", name)
    sql = (
        "SELECT id, application, version, service, from_clusters, to_clusters, trigger_kind, by_role,"
        " decision, outcome, detail, started, ended FROM history WHERE application = ?"
    )
    args: list[Any] = [name]
    if before is not None:
        sql += " AND id < ?"
        args.append(before)
    rows = conn.all(sql + " ORDER BY id DESC LIMIT ?", (*args, limit + 1))
    out = [
        {
            "id": r[0],
            "application": r[1],
            "version": r[2],
            "service": r[3],
            "from": json.loads(r[4]),
            "to": json.loads(r[5]),
            "trigger": r[6],
            "by": r[7],
            "decision": r[8],
            "outcome": r[9],
            "detail": r[10],
            "started": r[11],
            "ended": r[12],
            "duration": round(max(0.0, r[12] - r[11]), 3),
        }
        for r in rows[:limit]
    ]
    return {"history": out, "next": out[-1]["id"] if len(rows) > limit else None}


# -- placements ---------------------------------------------------------------------------
_PLACEMENT_SQL = "SELECT application, desired, current, term, seq, updated FROM placements"


def _placement(row: tuple) -> dict[str, Any]:
    app, desired, current, term, seq, updated = row
    return {
        "application": app,
        "desired": None if desired is None else json.loads(desired),
        "current": None if current is None else json.loads(current),
        "fencing": None if term is None else {"term": term, "seq": seq},
        "updated": updated,
    }


def placement_clusters(conn: Conn, app: str) -> set[str]:
    """Every cluster an application's placement names, desired or current (none: unplaced)."""
    row = conn.one("SELECT desired, current FROM placements WHERE application = ?", (app,))
    names: set[str] = set()
    for text in row or ():
        services = json.loads(text) if text else {}
        for entries in services.values() if isinstance(services, dict) else ():
            for entry in entries if isinstance(entries, list) else ():
                if isinstance(entry, dict) and isinstance(entry.get("cluster"), str):
                    names.add(entry["cluster"])
    return names


def list_placements(conn: Conn) -> list[dict]:
    return [_placement(r) for r in conn.all(_PLACEMENT_SQL + " ORDER BY application")]


def get_placement(conn: Conn, app: str) -> dict:
    row = conn.one(_PLACEMENT_SQL + " WHERE application = ?", (app,))
    if row is None:
        if conn.one("SELECT 1 FROM applications WHERE name = ?", (app,)) is None:
            raise not_found("application", app)
        raise not_found("placement of application", app)
    return _placement(row)


# -- events -------------------------------------------------------------------------------
def list_events(
    conn: Conn,
    since: float | None,
    after_id: int | None,
    application: str | None,
    cluster: str | None,
    limit: int,
) -> list[dict]:
    """Ascending by id; without since/after_id, the newest ``limit`` events."""
    where, args = [], []
    for clause, value in (
        ("ts > ?", since),
        ("id > ?", after_id),
        ("application = ?", application),
        ("cluster = ?", cluster),
    ):
        if value is not None:
            where.append(clause)
            args.append(value)
    sql = (
        "SELECT id, ts, type, reason, message, application, cluster, role, ref, fence_term,"
        " fence_seq, data FROM events"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    newest = since is None and after_id is None
    sql += f" ORDER BY id {'DESC' if newest else 'ASC'} LIMIT ?"
    rows = conn.all(sql, (*args, limit))
    if newest:
        rows.reverse()
    keys = ("id", "ts", "type", "reason", "message", "application", "cluster", "role")
    return [
        dict(
            zip(keys, r[:8], strict=True),
            ref=json.loads(r[8]) if r[8] else None,
            fencing=None if r[9] is None else {"term": r[9], "seq": r[10]},
            data=json.loads(r[11]) if r[11] else None,
        )
        for r in rows
    ]


# -- the inventory ------------------------------------------------------------------------
_INVENTORY_COLS = (
    "name, tier, location, labels, heartbeat, reachable, error, capacity_baseline,"
    " nodes, nodes_received, economics, node_economics, kube_version, api_versions"
)


def _inventory_clusters(
    conn: Conn,
    now: float,
    timeout: float,
    where: str = "",
    args: Any = (),
    raw: bool = False,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The inventory's cluster entries (of the rows ``where`` selects), sorted by name; ``raw``
    adds the KB's receive times ``heartbeat`` and ``nodes_received`` (for the change feed)."""
    clusters = []
    for (
        name,
        tier,
        location,
        labels,
        heartbeat,
        reachable,
        error,
        baseline,
        data,
        received,
        economics,
        node_economics,
        kube_version,
        api_versions,
    ) in conn.all(
        f"SELECT {_INVENTORY_COLS} FROM clusters {where} ORDER BY name"
        + ("" if limit is None else " LIMIT ?"),
        (*args, limit) if limit is not None else args,
    ):
        nodes: list[dict[str, Any]] = (
            [] if data is None else stored_nodes(data, received, economics, node_economics, now)
        )
        entry = {
            "name": name,
            "tier": tier,
            "location": location,
            "labels": json.loads(labels),
            "healthy": None,  # aged_cluster judges both (kept here for the answer's key order)
            "heartbeat_age": None,
            "reachable": None if reachable is None else bool(reachable),
            "error": error,
            "credentials_broken": credentials_broken({"reachable": reachable, "error": error}),
            "nodes": nodes,
            "capacity_baseline": json.loads(baseline) if baseline else None,
            # what its API server said of itself (Helm charts are rendered for it)
            "kube_version": kube_version,
            "api_versions": json.loads(api_versions) if api_versions else [],
        }
        cluster = aged_cluster(entry, age(now, heartbeat), age(now, received), timeout)
        cluster["free"] = free_capacity(cluster)
        if raw:
            cluster["heartbeat"] = heartbeat
            cluster["nodes_received"] = received
        clusters.append(cluster)
    return clusters


def inventory(
    conn: Conn, now: float, timeout: float, limit: int | None = None, after: str | None = None
) -> dict[str, Any]:
    """Everything the placement engine needs, in the contract's format, from one snapshot.

    Each cluster carries its ``free`` capacity (placement/model.py, the one definition the web UI
    shows) and each application the placement it runs on (``current_placement``: current, else
    desired), as the controller and the deploy module read it; and what its agent last said:
    ``reachable``, ``error`` and ``credentials_broken`` (the API refuses the agent's credentials:
    its nodes are the last observed ones, kept usable while the agent still reports).

    ``limit``/``after``: one page of clusters (by name, after the cluster ``after``); the answer
    then names the ``next`` page's ``after`` (null on the last page).
    """
    where, args = "", []
    if after is not None:
        where, args = "WHERE name > ?", [after]
    clusters = _inventory_clusters(
        conn, now, timeout, where, args, limit=None if limit is None else limit + 1
    )
    placements = {}
    for app, desired, current in conn.all(
        "SELECT application, desired, current FROM placements ORDER BY application"
    ):
        where_ = current_placement(
            {"current": current and json.loads(current), "desired": desired and json.loads(desired)}
        )
        if where_:
            placements[app] = where_
    out: dict[str, Any] = {"clusters": clusters, "latency_ms": latency_matrix(conn), "placements": placements}
    if limit is not None:
        more = len(clusters) > limit
        out["clusters"] = clusters[:limit]
        out["next"] = clusters[limit - 1]["name"] if more and limit > 0 else None
    return out


def summary(conn: Conn, now: float, timeout: float) -> dict[str, Any]:
    """Counts of clusters by tier and health, and the clusters that are not healthy (by name),
    without node lists: what ``qonnect status`` shows of a large federation."""
    tiers: dict[str, dict[str, int]] = {}
    unhealthy = []
    for name, tier, heartbeat, reachable, error in conn.all(
        "SELECT name, tier, heartbeat, reachable, error FROM clusters ORDER BY name"
    ):
        ok = healthy(now, heartbeat, reachable, timeout)
        counts = tiers.setdefault(tier, {"clusters": 0, "healthy": 0})
        counts["clusters"] += 1
        counts["healthy"] += int(ok)
        if not ok:
            unhealthy.append(
                {
                    "name": name,
                    "tier": tier,
                    "heartbeat_age": age(now, heartbeat),
                    "reachable": None if reachable is None else bool(reachable),
                    "error": error,
                }
            )
    return {
        "clusters": sum(t["clusters"] for t in tiers.values()),
        "healthy": sum(t["healthy"] for t in tiers.values()),
        "tiers": tiers,
        "unhealthy": unhealthy,
    }


# -- the change feed ------------------------------------------------------------------------
def _in(column: str, names: list[str]) -> str:
    return f"{column} IN ({', '.join('?' * len(names))})" if names else "1 = 0"


def changes(
    conn: Conn,
    now: float,
    timeout: float,
    since: float | None,
    stale_after: float,
    limit: int | None = None,
    after: str | None = None,
) -> dict[str, Any]:
    """What changed materially since the KB time ``since`` (everything when None), plus the
    clusters whose heartbeat or nodes are older than ``stale_after`` or whose agent says the
    cluster is unreachable (computed from the KB's receive times: a silent cluster shows without
    any write). A heartbeat-only report is no change: a cluster changes when it is (re-)registered
    or its reachability, error, node list or workload list changes (merge.py stamps ``changed``).

    Cluster entries are the inventory's, with the receive times ``heartbeat`` and
    ``nodes_received``; ``latencies`` are the raw (cluster, peer, ms) rows of the changed
    clusters; ``removed`` the clusters and applications deleted since (and not back).

    A full read may come in pages (``limit`` clusters by name, after the cluster ``after``;
    ``next`` names the next page's ``after``): each page carries its clusters' workloads and
    latencies, the first one the placements and applications."""
    full = since is None
    following = None
    if full and limit is not None:
        page = _inventory_clusters(
            conn,
            now,
            timeout,
            "" if after is None else "WHERE name > ?",
            () if after is None else (after,),
            raw=True,
            limit=limit + 1,
        )
        following = page[limit - 1]["name"] if len(page) > limit else None
        clusters = page[:limit]
        latencies, workloads = _of_clusters(conn, [c["name"] for c in clusters])
        placements = list_placements(conn) if after is None else []
        applications = list_applications(conn) if after is None else []
        removed: dict[str, list[str]] = {"clusters": [], "applications": []}
    elif full:
        clusters = _inventory_clusters(conn, now, timeout, raw=True)
        latencies = conn.all("SELECT cluster, peer, ms FROM latencies ORDER BY cluster, peer")
        workloads = list_workloads(conn, None, None)
        placements = list_placements(conn)
        applications = list_applications(conn)
        removed = {"clusters": [], "applications": []}
    else:
        clusters = _inventory_clusters(
            conn, now, timeout, "WHERE changed > ? OR updated > ?", (since, since), raw=True
        )
        latencies, workloads = _of_clusters(conn, [c["name"] for c in clusters])
        placements = [
            _placement(r)
            for r in conn.all(_PLACEMENT_SQL + " WHERE updated > ? ORDER BY application", (since,))
        ]
        applications = []
        for row in conn.all(_APP_SQL + " WHERE a.updated > ? ORDER BY a.name", (since,)):
            try:
                record = _application(row)
            except (ValueError, RecursionError):
                continue
            if _unservable(row[0], row[1], record) is None:
                applications.append(record)
        removed = {"clusters": [], "applications": []}
        for kind, name in conn.all(
            "SELECT kind, name FROM removals r WHERE ts > ? AND NOT EXISTS"
            " (SELECT 1 FROM clusters c WHERE r.kind = 'cluster' AND c.name = r.name) AND NOT EXISTS"
            " (SELECT 1 FROM applications a WHERE r.kind = 'application' AND a.name = r.name)"
            " ORDER BY kind, name",
            (since,),
        ):
            removed[kind + "s"].append(name)
    stale = [
        {"name": n, "heartbeat": hb, "nodes_received": nr, "reachable": None if r is None else bool(r)}
        for n, hb, nr, r in conn.all(
            "SELECT name, heartbeat, nodes_received, reachable FROM clusters WHERE heartbeat IS NULL"
            " OR heartbeat < ? OR reachable = 0 OR nodes_received < ? ORDER BY name",
            (now - stale_after, now - stale_after),
        )
    ]
    return {
        "full": full,
        "now": now,
        "heartbeat_timeout": timeout,
        "stale_after": stale_after,
        "clusters": clusters,
        "removed": removed,
        "workloads": workloads,
        "latencies": [list(r) for r in latencies],
        "placements": placements,
        "applications": applications,
        "stale": stale,
        "next": following,
    }


def _of_clusters(conn: Conn, names: list[str]) -> tuple[list[Any], list[dict[str, Any]]]:
    """The raw latency rows and the workloads of these clusters."""
    latencies, rows = [], []
    for part in range(0, len(names), 300):
        chunk = names[part : part + 300]
        latencies += conn.all(
            f"SELECT cluster, peer, ms FROM latencies WHERE {_in('cluster', chunk)} ORDER BY cluster, peer",
            chunk,
        )
        rows += conn.all(
            f"SELECT cluster, data FROM workloads WHERE {_in('cluster', chunk)}"
            " ORDER BY cluster, namespace, kind, name",
            chunk,
        )
    return latencies, [{"cluster": c, **json.loads(d)} for c, d in rows]
