"""Clusters, their nodes and workloads (from agent reports), agent reports, latencies."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Response

from qonnect.kb import ops, queries
from qonnect.kb.auth import Principal
from qonnect.kb.deps import KBState, principal, require, require_cluster, state
from qonnect.kb.models import (
    ClusterIn,
    ClusterList,
    ClusterOut,
    ClusterPatch,
    ClusterPut,
    LatencyMatrix,
    NodeList,
    Report,
    ReportAck,
    WorkloadList,
)
from qonnect.kb.routes import Name, QueryText, errors

router = APIRouter(tags=["clusters"])
Who = Annotated[Principal, Depends(principal)]
KB = Annotated[KBState, Depends(state)]


def _read_cluster(kb: KBState, name: str, who: Principal) -> dict:
    with kb.db.reader() as conn:
        return queries.get_cluster(
            conn, name, time.time(), kb.settings.heartbeat_timeout, who.sees_credentials
        )


def _record(name: str, body: ClusterIn | ClusterPut) -> dict:
    record = body.model_dump()
    record["name"] = name
    record["location"] = record.get("location") or name
    return record


@router.get("/clusters", response_model=ClusterList, response_model_exclude_unset=True, responses=errors())
def list_clusters(who: Who, kb: KB) -> dict:
    """All registered clusters with their agent status; credential fields only for admin and
    controller tokens."""
    with kb.db.reader() as conn:
        found = queries.list_clusters(conn, time.time(), kb.settings.heartbeat_timeout, who.sees_credentials)
    return {"clusters": found}


@router.post(
    "/clusters",
    status_code=201,
    response_model=ClusterOut,
    response_model_exclude_unset=True,
    responses=errors(409, 413),
)
async def register_cluster(body: ClusterIn, who: Who, kb: KB) -> dict:
    """Register a cluster (409 if the name is taken)."""
    require(who, "admin", action="register clusters")
    record = _record(body.name, body)
    await kb.writer.submit(lambda conn: ops.create_cluster(conn, record, time.time()))
    return _read_cluster(kb, body.name, who)


@router.get(
    "/clusters/{name}", response_model=ClusterOut, response_model_exclude_unset=True, responses=errors(404)
)
def get_cluster(name: Name, who: Who, kb: KB) -> dict:
    return _read_cluster(kb, name, who)


@router.put(
    "/clusters/{name}",
    response_model=ClusterOut,
    response_model_exclude_unset=True,
    responses={**errors(413), 201: {"model": ClusterOut, "description": "created"}},
)
async def put_cluster(name: Name, body: ClusterPut, who: Who, kb: KB, response: Response) -> dict:
    """Create or replace a cluster's registration; its agent-reported state is kept."""
    require(who, "admin", action="register clusters")
    if body.name is not None and body.name != name:
        raise HTTPException(422, f"name: {body.name!r} does not match the name in the URL {name!r}")
    record = _record(name, body)
    created = await kb.writer.submit(lambda conn: ops.put_cluster(conn, record, time.time()))
    response.status_code = 201 if created else 200
    return _read_cluster(kb, name, who)


@router.patch(
    "/clusters/{name}",
    response_model=ClusterOut,
    response_model_exclude_unset=True,
    responses=errors(404, 413),
)
async def patch_cluster(name: Name, body: ClusterPatch, who: Who, kb: KB) -> dict:
    """Change only the given fields."""
    require(who, "admin", action="update clusters")
    changes = body.model_dump(include=body.model_fields_set)
    await kb.writer.submit(lambda conn: ops.patch_cluster(conn, name, changes, time.time()))
    return _read_cluster(kb, name, who)


@router.delete("/clusters/{name}", status_code=204, response_class=Response, responses=errors(404))
async def delete_cluster(name: Name, who: Who, kb: KB) -> Response:
    """Deregister a cluster and forget its nodes, workloads and latencies."""
    require(who, "admin", action="deregister clusters")
    await kb.writer.submit(lambda conn: ops.delete_cluster(conn, name))
    return Response(status_code=204)


@router.get("/clusters/{name}/nodes", response_model=NodeList, responses=errors(404))
def list_nodes(name: Name, who: Who, kb: KB) -> dict:
    """The nodes of the cluster's newest report that listed nodes."""
    with kb.db.reader() as conn:
        return {"nodes": queries.list_nodes(conn, name, time.time())}


@router.post("/clusters/{name}/reports", response_model=ReportAck, responses=errors(404, 413))
async def post_report(name: Name, report: Report, who: Who, kb: KB) -> dict:
    """An agent report (heartbeat, nodes, workloads, latencies). Per key the value with the
    highest seq wins, so duplicated, delayed or reordered reports converge. Acknowledged only
    once durably committed."""
    require_cluster(who, name, "report for")
    now = time.time()
    return await kb.writer.submit_bulk("report", (name, report, now))


@router.get("/workloads", response_model=WorkloadList, responses=errors())
def list_workloads(
    who: Who,
    kb: KB,
    application: QueryText = None,
    cluster: QueryText = None,
) -> dict:
    """Managed workloads as reported by the agents."""
    with kb.db.reader() as conn:
        return {"workloads": queries.list_workloads(conn, application, cluster)}


@router.get("/latency", response_model=LatencyMatrix, responses=errors())
def latency(who: Who, kb: KB) -> dict:
    """latency_ms[a][b]: measured round-trip time between locations a and b (the larger of the
    two ends' measurements where both measure the path)."""
    with kb.db.reader() as conn:
        return {"latency_ms": queries.latency_matrix(conn)}
