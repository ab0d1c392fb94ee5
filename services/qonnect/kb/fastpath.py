"""A short path for the hottest request, the agent report, around FastAPI's per-request cost.

Heartbeats dominate the KB's traffic (every agent, every few seconds). For a report whose token
is already in the token cache, whose role allows it and whose body is valid, this middleware
validates the body straight from bytes, hands it to the group writer and answers, skipping
FastAPI's routing and dependency resolution (several times the cost of the work itself).
Anything else - an unknown token, a forbidden cluster, an invalid body - falls through to the
regular FastAPI route, which gives the same answer the API documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from qonnect.kb.asgi import send_json
from qonnect.kb.errors import replay_body
from qonnect.kb.middleware import PRINCIPAL
from qonnect.kb.models import Report
from qonnect.kb.storage import is_unavailable

log = logging.getLogger(__name__)
_REPORT_PATH = re.compile(r"^/api/v1/clusters/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/reports$")


class ReportFastPath:
    """ASGI middleware: answer valid, authorised agent reports without FastAPI."""

    def __init__(self, app: Any) -> None:
        self.app = app  # the FastAPI app: its state holds the KB, it answers everything else

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match = _REPORT_PATH.match(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        body = await _read(receive)
        if body is None or not await self._handle(scope, send, match.group(1), body):
            await self.app(scope, replay_body(body or b"", receive), send)

    async def _handle(self, scope: dict, send: Any, cluster: str, body: bytes) -> bool:
        """True if answered here; False to let the FastAPI route answer."""
        kb = self.app.state.kb
        who = scope.get(PRINCIPAL)  # checked by AuthFirst before the body was read
        if who is None or not (who.role == "admin" or who.cluster == cluster):
            return False
        try:
            report = Report.model_validate_json(body)
        except ValidationError:
            return False
        fut = kb.writer.enqueue_bulk("report", (cluster, report, time.time()), asyncio.get_running_loop())
        with contextlib.suppress(Exception):
            await fut  # outcome() reads the result or the error
        status, data = outcome(fut)
        await send_json(send, status, data)
        return True


def outcome(fut: asyncio.Future) -> tuple[int, bytes]:
    """The status and body answering a report, from the writer's future."""
    exc = fut.exception()
    return answer(True, fut.result()) if exc is None else answer(False, exc)


def answer(ok: bool, value: Any) -> tuple[int, bytes]:
    """The status and body answering a report from the writer's result or error (also used by
    the protocol-level path in hotpath.py, so both answer alike)."""
    if ok:
        return 200, b'{"seq":%d,"applied":%s}' % (value["seq"], b"true" if value["applied"] else b"false")
    exc = value
    if isinstance(exc, HTTPException):
        return exc.status_code, json.dumps({"detail": exc.detail}).encode()
    if is_unavailable(exc):
        return 503, json.dumps({"detail": "the KB database is unavailable, retry later"}).encode()
    log.error("unexpected error storing a report", exc_info=exc)
    return 500, json.dumps({"detail": "internal error"}).encode()


async def _read(receive: Any) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
