"""The control endpoint both testbed engines serve, and the process life around it.

HTTP on 127.0.0.1 (a random port) with a bearer token stored with mode 0600 in DIR/testbed.json:
``qonnect testbed status/fail/recover/node-down/node-up/set/down`` talk to it. One class for both
engines (the emulator's FederationHost, the real engine's KubeFederationHost): each implements
the operations of :class:`Engine`, this module owns the routes, the token check, the request
parsing and the answers, so the two engines cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from qonnect_testbed.federation import FEDERATION_FILE, PID_FILE, STATE_FILE

log = logging.getLogger(__name__)


class ControlError(Exception):
    """A control request that cannot be done (unknown cluster or node, bad value)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (it may hold the control token), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


class Engine(Protocol):
    """What an engine does for the control endpoint; a ControlError is answered as such."""

    stopped: asyncio.Event

    async def status(self) -> dict[str, Any]: ...

    async def fail(self, name: str) -> None: ...

    async def recover(self, name: str) -> None: ...

    async def node(self, cluster: str, node: str, down: bool) -> None: ...

    async def labels(self, cluster: str, labels: dict[str, str | None], node: str | None) -> list[str]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ControlEndpoint:
    """The routes, the token check and the answers of the control endpoint of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.token = secrets.token_urlsafe(32)
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self, directory: Path, profile: str, clusters: int) -> None:
        """Listen, then write DIR/testbed.json (URL, token, pid) for the CLI."""
        app = web.Application(middlewares=[self._auth])
        app.add_routes(
            [
                web.get("/status", self._status),
                web.post("/clusters/{cluster}/fail", self._fail),
                web.post("/clusters/{cluster}/recover", self._recover),
                web.post("/clusters/{cluster}/nodes/{node}/down", self._node_down),
                web.post("/clusters/{cluster}/nodes/{node}/up", self._node_up),
                web.post("/clusters/{cluster}/labels", self._labels),
                web.post("/shutdown", self._shutdown),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site.port}"
        state = {
            "pid": os.getpid(),
            "admin_url": self.url,
            "admin_token": self.token,
            "federation": str(directory / FEDERATION_FILE),
            "started": time.time(),
            "profile": profile,
            "clusters": clusters,
        }
        write_private(directory / STATE_FILE, json.dumps(state, indent=2))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return web.json_response({"error": "missing or wrong control token"}, status=401)
        try:
            return await handler(request)
        except ControlError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(await self.engine.status())

    async def _fail(self, request: web.Request) -> web.Response:
        await self.engine.fail(request.match_info["cluster"])
        return web.json_response({"cluster": request.match_info["cluster"], "up": False})

    async def _recover(self, request: web.Request) -> web.Response:
        await self.engine.recover(request.match_info["cluster"])
        return web.json_response({"cluster": request.match_info["cluster"], "up": True})

    async def _node_down(self, request: web.Request) -> web.Response:
        await self.engine.node(request.match_info["cluster"], request.match_info["node"], down=True)
        return web.json_response({"node": request.match_info["node"], "ready": False})

    async def _node_up(self, request: web.Request) -> web.Response:
        await self.engine.node(request.match_info["cluster"], request.match_info["node"], down=False)
        return web.json_response({"node": request.match_info["node"], "ready": True})

    async def _labels(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise ControlError(
                400, "body: expected JSON {labels: {key: value or null}, node: name}"
            ) from None
        labels = body.get("labels") if isinstance(body, dict) else None
        if not isinstance(labels, dict) or not all(v is None or isinstance(v, str) for v in labels.values()):
            raise ControlError(400, "labels: expected a mapping of label keys to strings or null")
        nodes = await self.engine.labels(request.match_info["cluster"], labels, body.get("node"))
        return web.json_response({"cluster": request.match_info["cluster"], "nodes": nodes})

    async def _shutdown(self, request: web.Request) -> web.Response:
        asyncio.get_running_loop().call_soon(self.engine.stopped.set)
        return web.json_response({"stopping": True})


async def run_until_stopped(engine: Engine, directory: Path, name: str, started: Callable[[], str]) -> None:
    """Start the engine, serve until SIGTERM/SIGINT or a shutdown request, then stop it.

    DIR/testbed.pid holds this process's id meanwhile; ``started()`` says what serves.
    """
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, engine.stopped.set)
    directory.mkdir(parents=True, exist_ok=True)
    write_private(directory / PID_FILE, f"{os.getpid()}\n")
    try:
        await engine.start()
        log.info("testbed %s: %s", name, started())
        await engine.stopped.wait()
    finally:
        await engine.stop()
        with contextlib.suppress(FileNotFoundError):
            (directory / PID_FILE).unlink()
        log.info("testbed %s stopped", name)
