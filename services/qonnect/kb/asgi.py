"""Answering a request straight from ASGI middleware (before or around FastAPI): one JSON reply."""

from __future__ import annotations

import json
from typing import Any


async def send_json(send: Any, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """Send ``body`` (JSON bytes) with its status, content type and length, plus ``extra`` headers."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_detail(
    send: Any, status: int, detail: str, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """An error answer in FastAPI's shape, ``{"detail": ...}``."""
    await send_json(send, status, json.dumps({"detail": detail}).encode(), extra)
