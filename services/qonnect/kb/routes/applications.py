"""Applications (validated QoS specs, versioned) and their placements (fenced writes)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Response
from fastapi.concurrency import run_in_threadpool

from qonnect.kb import ops, queries, specs
from qonnect.kb.auth import Principal
from qonnect.kb.deps import KBState, principal, require, state
from qonnect.kb.models import (
    MAX_INT,
    ApplicationList,
    ApplicationOut,
    HistoryAck,
    HistoryIn,
    HistoryList,
    PlacementIn,
    PlacementList,
    PlacementOut,
    RollbackIn,
    RollbackOut,
    VersionList,
    VersionOut,
)
from qonnect.kb.redact import for_reader
from qonnect.kb.routes import Name, errors

router = APIRouter(tags=["applications"])
Who = Annotated[Principal, Depends(principal)]
KB = Annotated[KBState, Depends(state)]
Version = Annotated[int, Path(ge=1, le=MAX_INT)]


@router.get(
    "/applications", response_model=ApplicationList, response_model_exclude_none=True, responses=errors()
)
def list_applications(who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        found = queries.list_applications(conn)
    return {"applications": [for_reader(a, who, kb.digest_key) for a in found]}  # Secrets: kb/redact.py


@router.get(
    "/applications/{name}",
    response_model=ApplicationOut,
    response_model_exclude_none=True,
    responses=errors(404),
)
def get_application(name: Name, who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        return for_reader(queries.get_application(conn, name), who, kb.digest_key)


@router.put(
    "/applications/{name}",
    response_model=ApplicationOut,
    response_model_exclude_none=True,
    responses=errors(413),
)
async def put_application(
    name: Name,
    who: Who,
    kb: KB,
    spec: Annotated[
        dict[str, Any],
        Body(description="a QoS spec (qonnect.io/v1 or QONNECT's format) with its manifests inline"),
    ],
) -> dict:
    """Store a spec after validating it; a changed spec becomes a new version, an identical one
    changes nothing. Invalid specs get 422 listing every problem."""
    require(who, "admin", action="write applications")
    normalized = await run_in_threadpool(specs.validate, name, spec)
    result = await kb.writer.submit(
        lambda conn: ops.put_application(conn, name, spec, normalized, time.time()),
        lock=("application", name),
    )
    with kb.db.reader() as conn:  # this write's version, even if another one followed
        record = queries.get_application(conn, name, result["version"])
    record["changed"] = result["changed"]
    return for_reader(record, who, kb.digest_key)


@router.delete("/applications/{name}", status_code=204, response_class=Response, responses=errors(404))
async def delete_application(name: Name, who: Who, kb: KB) -> Response:
    """Forget an application, its versions and its placement."""
    require(who, "admin", action="delete applications")
    await kb.writer.submit(lambda conn: ops.delete_application(conn, name), lock=("application", name))
    return Response(status_code=204)


@router.get("/applications/{name}/versions", response_model=VersionList, responses=errors(404))
def list_versions(name: Name, who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        found = queries.list_versions(conn, name)
    return {"versions": [for_reader(v, who, kb.digest_key) for v in found]}


@router.get("/applications/{name}/versions/{version}", response_model=VersionOut, responses=errors(404))
def get_version(name: Name, version: Version, who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        return for_reader(queries.list_versions(conn, name, version)[0], who, kb.digest_key)


@router.post("/applications/{name}/rollback", response_model=RollbackOut, responses=errors(404, 409))
async def roll_back(name: Name, body: RollbackIn, who: Who, kb: KB) -> dict:
    """Store an older version's spec again as the newest version, while ``failing`` is still the
    current one: what the controller does when a version fails on several clusters. It can only
    restore a version a user stored (controllers must send their fencing token)."""
    require(who, "admin", "controller", action="roll back applications")
    if body.fencing is None and who.role != "admin":
        raise HTTPException(403, "fencing: is required for controller tokens ({term, seq})")
    return await kb.writer.submit(
        lambda conn: ops.roll_back_application(conn, name, body, who.role, time.time()),
        lock=("application", name),
    )


@router.get(
    "/applications/{name}/history",
    response_model=HistoryList,
    response_model_by_alias=True,
    responses=errors(404),
)
def list_history(
    name: Name,
    who: Who,
    kb: KB,
    limit: Annotated[int, Query(ge=1, le=500, description="rows per page")] = 50,
    before: Annotated[int | None, Query(ge=1, le=MAX_INT, description="the previous page's 'next'")] = None,
) -> dict:
    """Every placement change of the application, newest first: application, version, service,
    from -> to clusters, trigger, decision, outcome and duration (any role may read it)."""
    with kb.db.reader() as conn:
        return queries.list_history(conn, name, limit, before)


@router.post(
    "/applications/{name}/history", status_code=201, response_model=HistoryAck, responses=errors(404, 409)
)
async def record_history(name: Name, body: HistoryIn, who: Who, kb: KB) -> dict:
    """Record placement changes as they ended (a user's deploy, a controller's run); a succeeded
    one marks the version ready on its clusters, a failed one failed. Controllers must send their
    fencing token."""
    require(who, "admin", "controller", action="record history")
    if body.fencing is None and who.role != "admin":
        raise HTTPException(403, "fencing: is required for controller tokens ({term, seq})")
    count = await kb.writer.submit(
        lambda conn: ops.record_history(conn, name, body, who.role, time.time()), lock=("application", name)
    )
    return {"recorded": count}


@router.get("/placements", response_model=PlacementList, responses=errors(), tags=["placements"])
def list_placements(who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        return {"placements": queries.list_placements(conn)}


@router.get("/placements/{app}", response_model=PlacementOut, responses=errors(404), tags=["placements"])
def get_placement(app: Name, who: Who, kb: KB) -> dict:
    with kb.db.reader() as conn:
        return queries.get_placement(conn, app)


@router.put(
    "/placements/{app}", response_model=PlacementOut, responses=errors(404, 409, 413), tags=["placements"]
)
async def put_placement(app: Name, body: PlacementIn, who: Who, kb: KB) -> dict:
    """Write the desired and/or current placement. Controllers must send their fencing token
    (Raft term, seq); a token older than the stored one is refused with 409."""
    require(who, "admin", "controller", action="write placements")
    if body.fencing is None and who.role != "admin":
        raise HTTPException(403, "fencing: is required for controller tokens ({term, seq})")
    await kb.writer.submit(
        lambda conn: ops.put_placement(conn, app, body, time.time()), lock=("application", app)
    )
    with kb.db.reader() as conn:
        return queries.get_placement(conn, app)


@router.delete(
    "/placements/{app}/fencing", response_model=PlacementOut, responses=errors(404), tags=["placements"]
)
async def reset_fencing(app: Name, who: Who, kb: KB) -> dict:
    """Forget the stored fencing token (admin only), e.g. after a bogus token so large that no
    controller would ever exceed it; the next fenced write sets it again."""
    require(who, "admin", action="reset fencing tokens")
    await kb.writer.submit(lambda conn: ops.reset_fencing(conn, app, time.time()), lock=("application", app))
    with kb.db.reader() as conn:
        return queries.get_placement(conn, app)
