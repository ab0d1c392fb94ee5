"""Error answers: every failure is JSON ``{"detail": ...}`` naming the field, never a 500 for
bad input; plus the request-body size limit (413)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from qonnect.kb.asgi import send_detail
from qonnect.kb.specs import SpecError
from qonnect.kb.storage import is_conflict, is_unavailable

log = logging.getLogger(__name__)


def _field(loc: tuple | list) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return ".".join(rest) if where == "body" and rest else ".".join(parts)
    return ".".join(parts) or "body"


def _message(err: dict[str, Any]) -> str:
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "json_invalid":
        ctx = err.get("ctx") or {}
        return f"malformed JSON ({ctx.get('error', 'cannot be parsed')})"
    return msg.removeprefix("Value error, ")


def validation_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    items = [{"field": _field(e.get("loc", ())), "message": _message(e)} for e in errors]
    detail = "; ".join(f"{i['field']}: {i['message']}" for i in items) or "invalid request"
    return {"detail": detail, "errors": items}


async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse(validation_body(list(exc.errors())), status_code=422)


async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 400 and detail == "There was an error parsing the body":
        detail = "body: cannot be parsed (not UTF-8 JSON, or nested too deeply)"
    return JSONResponse(
        {"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _spec(_request: Request, exc: SpecError) -> JSONResponse:
    items = []
    for text in exc.errors:
        field, _sep, message = text.partition(": ")
        items.append({"field": field if message else "spec", "message": message or text})
    return JSONResponse(
        {"detail": "invalid application spec: " + "; ".join(exc.errors), "errors": items}, status_code=422
    )


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    if is_unavailable(exc):
        log.error("database unavailable: %s", exc)
        return JSONResponse(
            {"detail": "the KB database is unavailable, retry later"},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    if is_conflict(exc):
        log.warning("write conflict with another KB instance persisted: %s", exc)
        return JSONResponse(
            {"detail": "conflict with a concurrent write through another KB instance, retry"}, status_code=409
        )
    log.exception("unexpected error")
    return JSONResponse({"detail": "internal error"}, status_code=500)


def install(app: FastAPI) -> None:
    # the decorator form: Starlette types add_exception_handler's handler as taking any
    # Exception, which a handler of one exception class is not
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(StarletteHTTPException)(_http)
    app.exception_handler(SpecError)(_spec)
    app.exception_handler(Exception)(_unexpected)


class BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes with 413 before the app parses them."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reply(send, 400, "Content-Length: not an integer")
                    return
                if declared > self.limit:
                    await self._reply(send, 413, self._too_big())
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)  # disconnect: let the app see it
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._reply(send, 413, self._too_big())
                return
            chunks.append(body)
            more = message.get("more_body", False)
        await self.app(scope, replay_body(b"".join(chunks), receive), send)

    def _too_big(self) -> str:
        return f"body: larger than the limit of {self.limit} bytes (--max-body)"

    @staticmethod
    async def _reply(send: Any, status: int, detail: str) -> None:
        await send_detail(send, status, detail, ((b"connection", b"close"),))


def replay_body(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that hands the app a body already read, then defers to the real one."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
