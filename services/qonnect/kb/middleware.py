"""ASGI middleware around the KB application, outermost first:

- ``AccessLog``: one line per request (method, path, status, duration, the token's *name*);
- ``SecurityHeaders``: ``Cache-Control: no-store`` (answers carry tokens and credentials) and
  ``X-Content-Type-Options: nosniff`` on every answer that does not set its own;
- ``AuthFirst``: the bearer token is checked before anything reads a request body, so a
  client without a valid token cannot make the KB buffer (or parse) anything. The API and its
  schema (/openapi.json, and /docs, /redoc should they ever be served) need a token; only
  /healthz and the static /ui page do not.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from qonnect.kb import auth
from qonnect.kb.asgi import send_detail
from qonnect.kb.storage import is_unavailable

log = logging.getLogger(__name__)
access_log = logging.getLogger("qonnect.kb.access")
PRINCIPAL = "qonnect.principal"  # scope key: the authenticated caller, for the access log
SCHEMA_PATHS = frozenset({"/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"})


def needs_token(path: str) -> bool:
    """The API and its schema (which maps every route and field for an attacker) need a token."""
    return path.startswith("/api/") or path.rstrip("/") in SCHEMA_PATHS


def bearer(scope: dict) -> str | None:
    """The bearer token of a request, or None."""
    for key, value in scope["headers"]:
        if key == b"authorization":
            scheme, _sep, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


async def _reply(send: Any, status: int, detail: str, extra: list[tuple[bytes, bytes]]) -> None:
    await send_detail(send, status, detail, tuple(extra))


class AuthFirst:
    """401 for API requests without a valid token, before their body is read (and the
    connection is closed: its unread body is not worth reading)."""

    def __init__(self, app: Any, kb: Callable[[], Any]) -> None:
        self.app = app
        self.kb = kb  # the KB state, once the app has started

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not needs_token(scope["path"]):
            await self.app(scope, receive, send)
            return
        token = bearer(scope)
        close = [(b"www-authenticate", b"Bearer"), (b"connection", b"close")]
        if token is None:
            await _reply(send, 401, "Authorization: a bearer token is required", close)
            return
        kb = self.kb()
        digest = auth.hash_token(token)
        who = kb.tokens.get(digest)
        if who is None:
            try:
                who = await run_in_threadpool(kb.lookup, digest)
            except Exception as exc:
                if not is_unavailable(exc):
                    raise
                await _reply(
                    send,
                    503,
                    "the KB database is unavailable, retry later",
                    [(b"retry-after", b"1"), (b"connection", b"close")],
                )
                return
            if who is None:
                await _reply(send, 401, "Authorization: the bearer token is not valid", close)
                return
            kb.tokens.put(digest, who)
        scope[PRINCIPAL] = who
        await self.app(scope, receive, send)


class SecurityHeaders:
    DEFAULTS = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _value in headers}
                headers.extend(h for h in self.DEFAULTS if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class AccessLog:
    """Logs to ``qonnect.kb.access``; never the Authorization header, only the token's name."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_and_note(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            who = scope.get(PRINCIPAL)
            client = scope.get("client") or ("-", 0)
            access_log.info(
                "%s:%s %s %s %d %.1fms token=%s",
                client[0],
                client[1],
                scope["method"],
                json.dumps(scope.get("raw_path", b"").decode("latin-1")),
                status,
                (time.perf_counter() - started) * 1000,
                json.dumps(who.name) if who else "-",
            )
