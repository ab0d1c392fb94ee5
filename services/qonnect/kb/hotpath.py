"""Agent reports answered inside the HTTP protocol, without an ASGI request cycle.

At thousands of heartbeats per second the KB's CPU, not its database, is the limit, and most of
it went to the machinery around a report rather than to the report: uvicorn's request cycle and
task, five ASGI layers each wrapping ``send``/``receive``, message dicts. Here the protocol
itself recognises a report whose token is in the token cache and allowed for the cluster, whose
body is within the limit and valid: it validates the bytes, queues the report for the group
writer and writes the answer when the writer has committed it, with the same headers, bodies and
status codes as the API (``fastpath.answer``). Everything else - a token to look up, another
role, an invalid body, ``Expect: 100-continue``, a request behind a pending one (pipelining) -
is handed to the regular ASGI application unchanged, which gives the documented answer.
"""

from __future__ import annotations

import http
import re
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from qonnect.kb import auth
from qonnect.kb.fastpath import answer
from qonnect.kb.middleware import bearer
from qonnect.kb.models import Report
from qonnect.kb.protocol import GuardedHttpProtocol

_REPORT_URL = re.compile(rb"^/api/v1/clusters/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/reports$")
_SECURITY = b"cache-control: no-store\r\nx-content-type-options: nosniff\r\n"


def _reason(status: int) -> bytes:
    """The reason phrase of any status the writer's outcome may carry (never a KeyError)."""
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


_headers_cache: tuple[object, bytes] = (None, b"")


def _default_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (server, date) as bytes; uvicorn replaces the list when the
    date changes, so it is formatted once per list, not once per answer."""
    global _headers_cache
    if _headers_cache[0] is not headers:
        _headers_cache = (headers, b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers))
    return _headers_cache[1]


class _NoWaiter:
    """The message event of a report's cycle: nothing waits for it (an asyncio.Event per report
    was a tenth of the event loop's time). One shared instance: a cycle referring to itself
    would be garbage only the cycle collector frees, thousands per second."""

    __slots__ = ()

    def set(self) -> None:
        return None


_NO_WAITER = _NoWaiter()


class _Pending:
    """Stands in for uvicorn's request cycle while a report waits for its commit, so that a
    pipelined request behind it is queued (and answered after it) as uvicorn does."""

    __slots__ = ("disconnected", "keep_alive", "message_event", "response_complete", "response_started")

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.message_event = _NO_WAITER  # uvicorn only calls set() on it: nobody awaits this cycle


class ReportProtocol(GuardedHttpProtocol):
    """GuardedHttpProtocol with the report short path; configure it with ``reporting(...)``."""

    kb_state: Callable[[], Any] = staticmethod(lambda: None)  # the KB state once started
    max_body: int = 1_048_576
    _kb: Any = None  # kb_state(), kept (per class) once there is one

    def kb(self) -> Any:
        kb = type(self)._kb
        if kb is None:
            kb = type(self)._kb = self.kb_state()
        return kb

    def on_message_begin(self) -> None:
        # what uvicorn's on_message_begin does, except building the ASGI scope (a dict and a
        # copy of the app state per request): only a request handed to the app needs one
        self.url = b""
        self.headers = []
        self.expect_100_continue = False
        self._begin_guard()
        self._scoped = False
        self._report: tuple[str, list[bytes]] | None = None

    def on_headers_complete(self) -> None:
        cluster = self._candidate()
        if cluster is None:
            self._scope()
            super().on_headers_complete()
            return
        self._report = (cluster, [])

    def on_body(self, body: bytes) -> None:
        if self._report is None:
            super().on_body(body)
        else:
            self._report[1].append(body)

    def on_message_complete(self) -> None:
        report = self._report
        if report is None:
            super().on_message_complete()
            return
        self._report = None
        body = b"".join(report[1])
        kb = self.kb()
        try:
            parsed = Report.model_validate_json(body)
        except ValidationError:  # the API's route names the field
            self._hand_over(body)
            return
        keep_alive = self.parser.should_keep_alive()
        self._disarm()
        pending = self.cycle = _Pending(keep_alive)  # type: ignore[assignment]
        kb.writer.enqueue_bulk_call(
            "report",
            (report[0], parsed, time.time()),
            self.loop,
            lambda ok, value: self._answer(pending, ok, value),
        )

    # -- helpers ------------------------------------------------------------------------------
    def _candidate(self) -> str | None:
        """The cluster name if this request may take the short path, else None."""
        if (self.cycle is not None and not self.cycle.response_complete) or self.expect_100_continue:
            return None
        if self.parser.get_method() != b"POST" or self.parser.get_http_version() != "1.1":
            return None
        match = _REPORT_URL.match(self.url)
        kb = self.kb()
        if match is None or kb is None:
            return None
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return None
        if length is None or not length.isdigit() or int(length) > self.max_body:
            return None  # the ASGI path answers 400/411/413
        token = bearer({"headers": self.headers})
        who = kb.tokens.get(auth.hash_token(token)) if token else None
        cluster = match.group(1).decode("ascii")
        if who is None or not (who.role == "admin" or who.cluster == cluster):
            return None
        return cluster

    def _scope(self) -> None:
        """Build uvicorn's per-request state for a request the ASGI application answers."""
        if self._scoped:
            return
        self._scoped = True
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        HttpToolsProtocol.on_message_begin(self)
        self.url, self.headers, self.expect_100_continue = url, headers, expect
        self.scope["headers"] = headers

    def _hand_over(self, body: bytes) -> None:
        """Give the request to the ASGI application as if it had just arrived."""
        self._scope()
        super().on_headers_complete()
        if body:
            super().on_body(body)
        super().on_message_complete()

    def _answer(self, pending: _Pending, ok: bool, value: Any) -> None:
        status, data = answer(ok, value)
        pending.response_started = pending.response_complete = True
        if self.transport.is_closing() or pending.disconnected:
            return
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _reason(status)),
            _default_headers(self.server_state.default_headers),
            b"content-type: application/json\r\ncontent-length: %d\r\n" % len(data),
            _SECURITY,
        ]
        if not pending.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        head.append(data)
        self.transport.write(b"".join(head))
        if not pending.keep_alive:
            self.transport.close()
            return
        self.on_response_complete()  # the next pipelined request, or the keep-alive timer


def reporting(
    request_timeout: float, max_connections: int, max_body: int, kb: Callable[[], Any]
) -> type[ReportProtocol]:
    """The protocol class for uvicorn's ``http=``: the guard's limits and the report path."""
    attrs: dict[str, Any] = {
        "request_timeout": request_timeout,
        "max_connections": max_connections,
        "max_body": max_body,
        "kb_state": staticmethod(kb),
    }
    return type("ReportHttp", (ReportProtocol,), attrs)
