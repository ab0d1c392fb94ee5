"""The KB's FastAPI application factory.

``create_app(settings)`` opens the database, applies pending migrations and starts the group
writer when the server starts, and stops them when it shuts down. Paths: the API under
/api/v1 and the schema at /openapi.json with a token, /healthz without one; /ui is left free
for the status page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi

import qonnect
from qonnect.kb import auth, errors, merge, migrations, redact
from qonnect.kb.deps import KBState, Settings
from qonnect.kb.fastpath import ReportFastPath
from qonnect.kb.middleware import AccessLog, AuthFirst, SecurityHeaders
from qonnect.kb.routes import applications, clusters, system, ui
from qonnect.kb.storage import Database
from qonnect.kb.writer import GroupWriter

log = logging.getLogger(__name__)
CHECKPOINT_SECONDS = 1.0

DESCRIPTION = """The qonnect Knowledge Base: clusters, nodes, heartbeats, latencies,
applications (validated QoS specs, versioned), placements (fenced by the controller's Raft term
and sequence) and events.

Every call under `/api/v1`, and this schema, needs `Authorization: Bearer <token>`. Roles: `admin` (everything),
`controller` (reads; writes placements and events), `agent` (bound to one cluster: writes its
reports and events), `reader` (reads; never sees credential fields). Errors are
`{"detail": "<field>: <problem>"}`; bodies over the configured limit get 413."""


# s; a write waits at most this long for others to share its transaction, under load only.
# PostgreSQL: a fixed cost per statement and round trip. SQLite: at 2,000 reports/s a commit
# (an fsync) at most every 5 ms, ~10 reports each, cost a quarter less CPU per report.
COMMIT_INTERVAL = {"postgresql": 0.02, "sqlite": 0.005}


def open_state(settings: Settings) -> KBState:
    """Open the database, migrate it and start the writer (used by the app and by tools)."""
    db = Database(settings.db_url)
    migrations.migrate(db)
    writer = GroupWriter(
        db,
        bulk={"report": merge.ReportMerger()},
        commit_interval=COMMIT_INTERVAL[db.dialect],
        one_statement=frozenset({"report"}) if db.dialect in merge.ONE_STATEMENT else frozenset(),
    )
    writer.start()
    return KBState(settings=settings, db=db, writer=writer, digest_key=redact.digest_key(db))


def close_state(kb: KBState) -> None:
    kb.writer.stop()
    kb.db.close()


async def _every(seconds: float, job: Callable[[], None]) -> None:
    """Run a blocking housekeeping job (token reload, WAL checkpoint) periodically."""
    while True:
        try:
            await run_in_threadpool(job)
        except Exception as exc:  # keep serving; the next round retries
            log.warning("%s failed: %s", getattr(job, "__name__", job), exc)
        await asyncio.sleep(seconds)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema, with FastAPI's own validation-error shape replaced by ours."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        comps = schema.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            comps.pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kb = app.state.kb = await run_in_threadpool(open_state, settings)
        tasks = [
            asyncio.create_task(_every(auth.RELOAD_SECONDS, kb.reload_tokens)),
            asyncio.create_task(_every(CHECKPOINT_SECONDS, kb.db.checkpoint)),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await run_in_threadpool(close_state, kb)

    app = FastAPI(
        title="qonnect Knowledge Base",
        version=qonnect.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app)
    app.include_router(clusters.router, prefix="/api/v1")
    app.include_router(applications.router, prefix="/api/v1")
    app.include_router(system.router, prefix="/api/v1")
    app.include_router(system.health_router)
    app.include_router(ui.router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def asgi_app(settings: Settings, api: FastAPI | None = None) -> Any:
    """What the server runs: (the access log,) security headers, the token check, the body
    limit, the heartbeat short path, then FastAPI (``api``, made here unless given). No
    interactive /docs: it would load its script from a CDN; the schema is at /openapi.json."""
    api = api or create_app(settings)
    inner = errors.BodyLimit(ReportFastPath(api), limit=settings.max_body)
    outer = SecurityHeaders(AuthFirst(inner, lambda: api.state.kb))
    return AccessLog(outer) if settings.access_log else outer
