"""Events, the whole inventory in one read, token creation, identity and health."""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response

from qonnect.kb import auth, migrations, ops, queries, trust
from qonnect.kb.auth import Principal
from qonnect.kb.deps import KBState, principal, require, state
from qonnect.kb.models import (
    MAX_INT,
    EventIn,
    EventList,
    EventOut,
    FenceOut,
    Fencing,
    Health,
    Inventory,
    InventoryCluster,
    InventoryPage,
    Summary,
    TokenIn,
    TokenList,
    TokenOut,
)
from qonnect.kb.redact import for_reader
from qonnect.kb.routes import QueryText, errors

CONTROLLER_EVENTS = "controller."  # event types owned by the controller role (any case)
router = APIRouter()
health_router = APIRouter()
Who = Annotated[Principal, Depends(principal)]
KB = Annotated[KBState, Depends(state)]


@router.get("/events", response_model=EventList, responses=errors(), tags=["events"])
def list_events(
    who: Who,
    kb: KB,
    since: Annotated[float | None, Query(ge=0, le=1e300, description="unix time: events after it")] = None,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_INT, description="events with a larger id")] = None,
    application: QueryText = None,
    cluster: QueryText = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict:
    """Events in ascending id order; without since/after_id the newest ``limit``."""
    with kb.db.reader() as conn:
        return {"events": queries.list_events(conn, since, after_id, application, cluster, limit)}


@router.post("/events", status_code=201, response_model=EventOut, responses=errors(413), tags=["events"])
async def post_event(event: EventIn, who: Who, kb: KB) -> dict:
    """Record an event (deploy, failure, migration, ...). Agents may only post about their own
    cluster (it is filled in when left out) and applications placed on it (desired or current)."""
    require(who, "admin", "controller", "agent", action="post events")
    if who.role == "agent":
        if event.cluster is None:
            event = event.model_copy(update={"cluster": who.cluster})
        elif event.cluster != who.cluster:
            raise HTTPException(403, f"cluster: this agent token is bound to {who.cluster!r}")
        if event.application is not None:  # no writing into the history of others' applications
            with kb.db.reader() as conn:
                placed = who.cluster in queries.placement_clusters(conn, event.application)
            if not placed:
                raise HTTPException(
                    403,
                    f"application: {event.application!r} is not placed on {who.cluster!r}, the cluster "
                    "this agent token is bound to; an agent's events may name only applications "
                    "placed on its own cluster",
                )
    # case-insensitively: "Controller.decision" reads as a controller event to people and tools
    controller_event = event.type.casefold().startswith(CONTROLLER_EVENTS)
    if controller_event and who.role != "controller":
        raise HTTPException(403, f"type: {event.type!r} events are written only by controller tokens")
    if controller_event and event.fencing is None:
        raise HTTPException(422, "fencing: is required for controller.* events ({term, seq})")
    now = time.time()
    problem = trust.ts_problem(event.ts, now)
    if problem:
        raise HTTPException(422, problem)
    return await kb.writer.submit(lambda conn: ops.insert_event(conn, event, now, who.role))


@router.get("/fence", response_model=FenceOut, responses=errors(), tags=["events"])
def get_fence(who: Who, kb: KB) -> dict:
    """The controller fence: the newest leader's fencing token; older ones are refused."""
    with kb.db.reader() as conn:
        term, seq, updated = ops.get_fence(conn)
    return {"term": term, "seq": seq, "updated": updated}


@router.put("/fence", response_model=FenceOut, responses=errors(409), tags=["events"])
async def raise_fence(body: Fencing, who: Who, kb: KB) -> dict:
    """A new controller leader raises the fence to its token before it acts, so a deposed
    leader's placements and controller.* events are refused (409) from then on."""
    require(who, "controller", action="raise the controller fence")
    now = time.time()
    return await kb.writer.submit(lambda conn: ops.raise_fence(conn, body.term, body.seq, now))


@router.get("/inventory", response_model=Inventory, responses=errors(), tags=["inventory"])
def inventory(who: Who, kb: KB) -> dict:
    """Clusters with nodes and health, the latency matrix and current placements: everything
    the placement engine needs, from one consistent snapshot."""
    with kb.db.reader() as conn:
        return queries.inventory(conn, time.time(), kb.settings.heartbeat_timeout)


@router.get("/inventory/page", response_model=InventoryPage, responses=errors(), tags=["inventory"])
def inventory_page(
    who: Who,
    kb: KB,
    limit: Annotated[int, Query(ge=1, le=1000, description="clusters per page")] = 200,
    after: Annotated[QueryText, Query(description="the previous page's ``next``: clusters after it")] = None,
) -> dict:
    """The inventory one page of clusters at a time (by name); latency and placements whole on
    every page. ``next`` is the ``after`` of the next page, null on the last one."""
    with kb.db.reader() as conn:
        return queries.inventory(conn, time.time(), kb.settings.heartbeat_timeout, limit, after)


@router.get("/summary", response_model=Summary, responses=errors(), tags=["inventory"])
def summary(who: Who, kb: KB) -> dict:
    """Cluster counts by tier and health and the clusters that are not healthy, without nodes."""
    with kb.db.reader() as conn:
        return queries.summary(conn, time.time(), kb.settings.heartbeat_timeout)


# The change feed's cursor is "<instance>:<KB time of the read>". ``INSTANCE`` is new with every
# KB process, so a cursor from before a restart (or from another instance) asks for a full read.
INSTANCE = uuid.uuid4().hex[:12]
OVERLAP = 2.0  # seconds re-read before a cursor: changes stamped before the read, committed after it
STALE_AFTER = 3.0  # default: clusters whose heartbeat or nodes are older are listed as stale


def _since(cursor: str, now: float) -> float:
    """The KB time from which a cursor's changes are read again; 410 for a cursor not ours."""
    instance, _sep, stamp = cursor.partition(":")
    try:
        at = float(stamp)
    except ValueError:
        at = math.nan
    if (
        instance != INSTANCE
        or not math.isfinite(at)
        or at > now + 1
        or at < now - ops.REMOVALS_KEPT + OVERLAP
    ):
        raise HTTPException(
            410,
            "cursor: not known to this KB instance (it restarted, or the cursor is too old); "
            "read without one",
        )
    return at - OVERLAP


def _as_inventory(entry: dict) -> dict:
    """A cluster entry exactly as ``GET /inventory`` answers it, plus the receive times."""
    times = {"heartbeat": entry.pop("heartbeat"), "nodes_received": entry.pop("nodes_received")}
    return {**InventoryCluster.model_validate(entry).model_dump(mode="json"), **times}


@router.get("/changes", responses=errors(410), tags=["inventory"])
def changes(
    who: Who,
    kb: KB,
    cursor: Annotated[str | None, Query(max_length=100, description="the previous answer's cursor")] = None,
    stale_after: Annotated[float, Query(ge=0.5, le=3600, description="seconds")] = STALE_AFTER,
    limit: Annotated[int | None, Query(ge=1, le=5000, description="a full read: clusters per page")] = None,
    after: Annotated[QueryText, Query(description="a full read: the previous page's ``next``")] = None,
) -> Response:
    """The change feed: without ``cursor`` everything (``full``), else what changed materially
    since that cursor (a heartbeat alone is no change), and always the clusters whose heartbeat or
    nodes are older than ``stale_after`` or whose agent cannot reach them (``stale``). 410: the
    cursor is not known here (the KB restarted): read again without one. A full read may be paged
    (``limit``, ``after``; ``next``): the first page's cursor then covers the whole read."""
    if cursor is not None and (limit is not None or after is not None):
        raise HTTPException(422, "limit: pages are for a full read (without a cursor)")
    now = time.time()
    since = None if cursor is None else _since(cursor, now)
    # below the KB's heartbeat timeout: a cluster not listed is then healthy as far as its
    # heartbeat goes (the caller caps its age at the answer's stale_after)
    stale_after = min(stale_after, kb.settings.heartbeat_timeout / 2)
    with kb.db.reader() as conn:
        doc = queries.changes(conn, now, kb.settings.heartbeat_timeout, since, stale_after, limit, after)
    doc["clusters"] = [_as_inventory(c) for c in doc["clusters"]]
    doc["applications"] = [for_reader(a, who, kb.digest_key) for a in doc["applications"]]  # kb/redact.py
    doc["cursor"] = f"{INSTANCE}:{now!r}"
    body = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(body, media_type="application/json")


@router.post("/tokens", status_code=201, response_model=TokenOut, responses=errors(413), tags=["tokens"])
async def create_token(body: TokenIn, who: Who, kb: KB) -> dict:
    """Create a token; its clear text is in this answer only."""
    require(who, "admin", action="create tokens")
    return await kb.writer.submit(
        lambda conn: auth.insert_token(conn, body.role, body.cluster, body.name, time.time())
    )


@router.get("/tokens", response_model=TokenList, responses=errors(), tags=["tokens"])
def list_tokens(who: Who, kb: KB) -> dict:
    """Every token's id, name, role and cluster (never the token or its hash)."""
    require(who, "admin", action="list tokens")
    with kb.db.reader() as conn:
        return {"tokens": auth.list_tokens(conn)}


@router.delete(
    "/tokens/{ident}", status_code=204, response_class=Response, responses=errors(404), tags=["tokens"]
)
async def revoke_token(
    ident: Annotated[str, Path(min_length=16, max_length=16, pattern="^[0-9a-f]{16}$")], who: Who, kb: KB
) -> Response:
    """Revoke one token by id: at once on this instance, within a few seconds on others."""
    require(who, "admin", action="revoke tokens")
    count = await kb.writer.submit(lambda conn: auth.revoke_token_id(conn, ident))
    if not count:
        raise HTTPException(404, f"ident: no token has the id {ident!r}")
    kb.tokens.drop(ident)
    return Response(status_code=204)


@router.get("/whoami", response_model=dict[str, str | None], responses=errors(), tags=["tokens"])
def whoami(who: Who) -> dict:
    """The calling token's name, role and cluster (lets clients check a token)."""
    return {"name": who.name, "role": who.role, "cluster": who.cluster}


@health_router.get("/healthz", response_model=Health, responses={503: errors()[503]}, tags=["health"])
def healthz(kb: KB) -> dict:
    """Liveness and database reachability; needs no token."""
    return {"status": "ok", "schema_version": migrations.current_version(kb.db), "database": kb.db.dialect}
