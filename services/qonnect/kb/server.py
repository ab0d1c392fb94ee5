"""Run the KB under uvicorn (uvloop + httptools), on a socket bound before start-up so that
port 0 works and the chosen port can be handed to whoever started us."""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
from pathlib import Path

import uvicorn

from qonnect.kb.app import asgi_app, create_app
from qonnect.kb.deps import Settings
from qonnect.kb.hotpath import reporting
from qonnect.kb.middleware import access_log as access_logger
from qonnect.kb.protocol import guarded

log = logging.getLogger(__name__)
GC_GEN0_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)
GC_GEN1_THRESHOLD = 100  # young collections per middle one (CPython's default: 10)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, with the start-up heap moved out of the garbage collector's way.

    A full collection walks every tracked object: after start-up that is several hundred
    thousand (FastAPI, pydantic, the schema...), some 50 ms with the GIL held, during which no
    request is read and the writer thread cannot commit - most of the heartbeat tail. Those
    objects live as long as the process, so they are frozen; young objects are collected less
    often, in larger but still short passes (1-4 ms at 2,500 reports/s per instance, measured
    with ``gc.callbacks``). A middle-generation pass took 30-80 ms there, so it runs ten times
    less often: the report path creates no reference cycles, so little garbage waits for it.
    """

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, GC_GEN1_THRESHOLD, gc.get_threshold()[2])


def serve(
    settings: Settings,
    host: str,
    port: int,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    port_file: str | None = None,
    access_log: bool = False,
) -> None:
    # The writer thread gives up the GIL inside every SQLite call; with the default 5 ms switch
    # interval it then waits that long for the busy event loop to hand it back, per statement.
    sys.setswitchinterval(0.0005)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    scheme = "https" if tls_cert else "http"
    settings.access_log = settings.access_log or access_log
    if settings.access_log:  # our own lines (with the token's name), not uvicorn's
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s kb-access %(message)s"))
        access_logger.addHandler(handler)
        access_logger.setLevel(logging.INFO)
        access_logger.propagate = False
    api = create_app(settings)
    # reports skip the ASGI stack (hotpath.py); with the access log on, every request goes
    # through it so that each one is logged
    http = (
        guarded(settings.request_timeout, settings.max_connections)
        if settings.access_log
        else reporting(
            settings.request_timeout,
            settings.max_connections,
            settings.max_body,
            lambda: getattr(api.state, "kb", None),
        )
    )
    config = uvicorn.Config(
        asgi_app(settings, api),
        loop="uvloop",
        http=http,
        lifespan="on",
        access_log=False,
        log_level="warning",
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        timeout_keep_alive=75,
        backlog=4096,
        server_header=False,
        proxy_headers=False,
    )
    server = _Server(config)
    if port_file:
        tmp = Path(port_file).with_suffix(".tmp")
        tmp.write_text(f"{actual}\n")
        os.replace(tmp, port_file)
    print(f"qonnect kb: serving {scheme}://{host}:{actual} (pid {os.getpid()})", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
