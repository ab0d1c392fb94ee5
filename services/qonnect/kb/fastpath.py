"""A short path for the hottest request, the agent report, around FastAPI's per-request cost.

Heartbeats dominate the KB's traffic (every agent, every few seconds). For a report whose token
is already in the token cache, whose role allows it and whose body is valid, this middleware
validates the body straight from bytes, hands it to the group writer and answers, skipping
FastAPI's routing and dependency resolution (several times the cost of the work itself).
Anything else - an unknown token, a forbidden cluster, an invalid body - falls through to the
regular FastAPI route, which gives the same answer the API documents.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

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
        now = time.time()
        try:
            ack = await kb.writer.submit_bulk("report", (cluster, report, now))
        except HTTPException as exc:
            await _answer(send, exc.status_code, {"detail": exc.detail})
            return True
        except Exception as exc:
            if is_unavailable(exc):
                await _answer(send, 503, {"detail": "the KB database is unavailable, retry later"})
            else:
                log.exception("unexpected error storing a report")
                await _answer(send, 500, {"detail": "internal error"})
            return True
        await _send(
            send, 200, b'{"seq":%d,"applied":%s}' % (ack["seq"], b"true" if ack["applied"] else b"false")
        )
        return True


async def _read(receive: Any) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Any, status: int, payload: dict) -> None:
    await _send(send, status, json.dumps(payload).encode())


async def _send(send: Any, status: int, data: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
