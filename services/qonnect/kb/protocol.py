"""uvicorn's HTTP protocol with the limits an internet-facing KB needs per connection.

uvicorn starts no timer before a connection's first request and none while a request's headers
or body trickle in, does not bound the header block and accepts any number of connections: idle
or slow clients (no token needed) could hold sockets and memory indefinitely. Here every
request, from its first byte (or from the connection being opened) to its last body byte, must
arrive within ``request_timeout`` seconds; headers are bounded; connections above
``max_connections`` are answered 503 and closed at once.

This class and hotpath.py override uvicorn's HttpToolsProtocol internals (its request cycle,
parser callbacks and per-request state), so only the tested uvicorn range is accepted
(``TESTED_UVICORN``, kept in step with services/pyproject.toml), as controller/raft.py does for
pysyncobj: another version fails at start with the range to install, not with a broken answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from qonnect.errors import UserError
from qonnect.versions import require_tested

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 65_536
TESTED_UVICORN = ((0, 55, 0), (0, 56, 0))  # [lowest, first untested): keep in step with pyproject


class UvicornVersionError(UserError, RuntimeError):
    """The installed uvicorn is outside the range this protocol was tested with."""


def check_uvicorn_version(installed: str | None = None) -> None:
    """Refuse a uvicorn outside the tested range: this module overrides its internals."""
    require_tested("uvicorn", TESTED_UVICORN, UvicornVersionError, "the KB", "uvicorn[standard]", installed)


check_uvicorn_version()


def _answer(status: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\ncache-control: no-store\r\n"
        "x-content-type-options: nosniff\r\nconnection: close\r\n\r\n"
    ).encode() + body


class GuardedHttpProtocol(HttpToolsProtocol):
    """One connection; configure the limits with ``guarded(...)``."""

    request_timeout: float = 30.0
    max_connections: int = 4096

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._due: float | None = None  # when the request under way must be complete
        self._header_bytes = 0
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(
                _answer("503 Service Unavailable", "too many connections to this KB instance, retry later")
            )
            transport.close()
            return
        self._arm()  # the first request must come within the timeout, too

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begin_guard()

    def _begin_guard(self) -> None:
        """A new request: its header bytes count from zero and its deadline starts."""
        self._header_bytes = 0
        self._arm()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(
                "431 Request Header Fields Too Large", f"headers: larger than {MAX_HEADER_BYTES} bytes"
            )
            return
        # uvicorn's on_header, inline (it runs for every header of every request)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_message_complete(self) -> None:
        self._disarm()  # the request is in; the answer may take as long as it needs
        super().on_message_complete()

    # -- the per-request deadline -----------------------------------------------------------
    # One timer per connection, moved lazily: arming and disarming only set ``_due``, and the
    # timer, when it fires, sleeps again until ``_due`` if that moved (a timer created and
    # cancelled per request cost more than a tenth of the event loop's time at 5,000 requests/s).
    def _arm(self) -> None:
        self._due = self.loop.time() + self.request_timeout
        if self._deadline is None:
            self._deadline = self.loop.call_at(self._due, self._expired)

    def _disarm(self) -> None:
        self._due = None

    def _stop_timer(self) -> None:
        self._due = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._due is None:
            return
        if self.loop.time() < self._due:
            self._deadline = self.loop.call_at(self._due, self._expired)
            return
        self._due = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
            self._refuse("408 Request Timeout", f"request: not received within {self.request_timeout:g} s")
        else:  # an answer is half sent: nothing sensible can follow it
            self.transport.close()

    def _refuse(self, status: str, detail: str) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's receive() sees a disconnect
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(_answer(status, detail))
            self.transport.close()


def guarded(request_timeout: float, max_connections: int) -> type[GuardedHttpProtocol]:
    """The protocol class for uvicorn's ``http=`` with these limits."""
    attrs: dict[str, Any] = {"request_timeout": request_timeout, "max_connections": max_connections}
    return type("GuardedHttp", (GuardedHttpProtocol,), attrs)
