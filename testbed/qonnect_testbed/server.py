"""The testbed process: many emulated clusters in one asyncio loop, plus a control endpoint.

Each cluster has its Store, its simulation controllers and its API server app, served over TLS
on its own loopback address (127.0.0.2 upward) and a free port. ``fail`` closes the cluster's
listener and its open connections, so clients get "connection refused" as from a dead API
server; ``recover`` listens again on the same address and port with the state kept.

The control endpoint (HTTP on 127.0.0.1, a random port, a bearer token stored with mode 0600
in DIR/testbed.json) serves the CLI's status, fail, recover, node-down, node-up, set and
shutdown. Tokens never appear in logs or in the federation file.
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
import ssl
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from qonnect_testbed import federation, kubeconfig, latency, pki
from qonnect_testbed.apiserver import make_app
from qonnect_testbed.federation import FEDERATION_FILE, PID_FILE, STATE_FILE
from qonnect_testbed.fleet import ClusterSpec, Fleet
from qonnect_testbed.sim import ClusterSim
from qonnect_testbed.store import ApiError, Store

log = logging.getLogger(__name__)
K8S_VERSION = "v1.30.0"


class ControlError(Exception):
    """A control request that cannot be done (unknown cluster or node, bad value)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


class ClusterHost:
    """One emulated cluster: store, simulation, API app and its (closable) listener."""

    def __init__(
        self,
        spec: ClusterSpec,
        address: str,
        ssl_context: ssl.SSLContext,
        token: str,
        latency_map: latency.LatencyMap,
        start_delay: float,
        heartbeat_seconds: float,
        *,
        root_ca: str = "",
        start_delays: list | None = None,
        **sim_options: Any,
    ) -> None:
        self.spec = spec
        self.address = address
        self.port = 0
        self.token = token
        self.restricted_token = secrets.token_urlsafe(32)
        self.ssl_context = ssl_context
        self.store = Store(spec.name, root_ca=root_ca)
        self.sim = ClusterSim(
            self.store,
            spec,
            start_delay=start_delay,
            heartbeat_seconds=heartbeat_seconds,
            start_delays=start_delays,
            **sim_options,
        )
        self.app = make_app(
            self.store,
            token,
            middlewares=(latency.middleware(latency_map, spec.location),),
            version=K8S_VERSION,
            restricted_token=self.restricted_token,
        )
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        self._server: asyncio.AbstractServer | None = None

    @property
    def up(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        await self.runner.setup()
        await self.sim.start()
        await self.listen()

    async def listen(self) -> None:
        """Accept connections on the cluster's address (the first time on a free port)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.runner.server, self.address, self.port, ssl=self.ssl_context, reuse_address=True, backlog=128
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close_listener(self) -> None:
        """Stop accepting and drop open connections: clients see a dead API server."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for handler in self.runner.server.connections if self.runner.server else ():
            handler.force_close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def stop(self) -> None:
        await self.close_listener()
        await self.sim.stop()
        await self.runner.cleanup()


class FederationHost:
    """All clusters of a fleet in this process, with their files under one directory."""

    def __init__(
        self,
        fleet: Fleet,
        directory: Path,
        *,
        start_delay: float = 1.0,
        heartbeat_seconds: float = 10.0,
        **sim_options: Any,
    ) -> None:
        self.fleet = fleet
        self.sim_options = sim_options  # node timing: see sim.ClusterSim
        self.directory = directory
        self.start_delay = start_delay
        self.heartbeat_seconds = heartbeat_seconds
        self.clusters: dict[str, ClusterHost] = {}
        self.admin_token = secrets.token_urlsafe(32)
        self.admin_url = ""
        self.stopped = asyncio.Event()
        self._admin_runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Generate the PKI, start every cluster, write kubeconfigs, federation and state files."""
        self.directory.mkdir(parents=True, exist_ok=True)
        pki_dir = self.directory / "pki"
        ca = pki.CertificateAuthority.create()
        ca_file = ca.save(pki_dir)
        addresses = {spec.name: federation.cluster_address(i) for i, spec in enumerate(self.fleet.clusters)}
        latency_map = latency.LatencyMap(
            {addresses[s.name]: s.location for s in self.fleet.clusters}, self.fleet.latency_ms
        )
        for spec in self.fleet.clusters:
            cert, key = ca.issue_server(spec.name, [addresses[spec.name]])
            cert_path, key_path = pki.write_server_pair(pki_dir, spec.name, cert, key)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert_path, key_path)
            self.clusters[spec.name] = ClusterHost(
                spec,
                addresses[spec.name],
                context,
                secrets.token_urlsafe(32),
                latency_map,
                self.start_delay,
                self.heartbeat_seconds,
                root_ca=ca.cert_pem.decode(),
                start_delays=self.fleet.start_delays,
                **self.sim_options,
            )
        for host in self.clusters.values():
            await host.start()
        kubeconfigs, restricted = {}, {}
        for name, host in self.clusters.items():
            server = f"https://{host.address}:{host.port}"
            doc = kubeconfig.build(name, server, host.token, ca.cert_pem)
            kubeconfigs[name] = kubeconfig.write(self.directory / "kubeconfigs" / f"{name}.yaml", doc)
            doc = kubeconfig.build(name, server, host.restricted_token, ca.cert_pem)
            restricted[name] = kubeconfig.write(
                self.directory / "kubeconfigs" / "restricted" / f"{name}.yaml", doc
            )
        endpoints = {n: (h.address, h.port) for n, h in self.clusters.items()}
        federation.write(
            self.directory / FEDERATION_FILE,
            federation.document(self.fleet, endpoints, kubeconfigs, ca_file, restricted),
        )
        await self._start_admin()

    async def _start_admin(self) -> None:
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
        self._admin_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._admin_runner.setup()
        site = web.TCPSite(self._admin_runner, "127.0.0.1", 0)
        await site.start()
        self.admin_url = f"http://127.0.0.1:{site.port}"
        state = {
            "pid": os.getpid(),
            "admin_url": self.admin_url,
            "admin_token": self.admin_token,
            "federation": str(self.directory / FEDERATION_FILE),
            "started": time.time(),
            "profile": self.fleet.name,
            "clusters": len(self.clusters),
        }
        _write_private(self.directory / STATE_FILE, json.dumps(state, indent=2))

    async def stop(self) -> None:
        for host in self.clusters.values():
            await host.stop()
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / STATE_FILE).unlink()

    # ----------------------------------------------------------------- control operations

    def cluster(self, name: str) -> ClusterHost:
        try:
            return self.clusters[name]
        except KeyError:
            raise ControlError(404, f"no cluster {name!r} (clusters: {', '.join(self.clusters)})") from None

    def status(self) -> dict[str, Any]:
        return {
            "profile": self.fleet.name,
            "pid": os.getpid(),
            "clusters": [
                {
                    "name": name,
                    "tier": h.spec.tier,
                    "location": h.spec.location,
                    "server": f"https://{h.address}:{h.port}",
                    "up": h.up,
                    **h.sim.summary(),
                }
                for name, h in self.clusters.items()
            ],
        }

    async def fail(self, name: str) -> None:
        await self.cluster(name).close_listener()

    async def recover(self, name: str) -> None:
        host = self.cluster(name)
        if not host.up:
            await host.listen()

    def node(self, cluster: str, node: str, down: bool) -> None:
        sim = self.cluster(cluster).sim
        try:
            (sim.nodes.set_down if down else sim.nodes.set_up)(node)
        except ApiError as exc:
            raise ControlError(exc.code, exc.message) from None

    def labels(self, cluster: str, labels: dict[str, str | None], node: str | None) -> list[str]:
        sim = self.cluster(cluster).sim
        try:
            return sim.nodes.set_labels(labels, node)
        except ApiError as exc:
            raise ControlError(exc.code if exc.code != 409 else 422, exc.message) from None

    # ----------------------------------------------------------------- control endpoint

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.admin_token}".encode()):
            return web.json_response({"error": "missing or wrong control token"}, status=401)
        try:
            return await handler(request)
        except ControlError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())

    async def _fail(self, request: web.Request) -> web.Response:
        await self.fail(request.match_info["cluster"])
        return web.json_response({"cluster": request.match_info["cluster"], "up": False})

    async def _recover(self, request: web.Request) -> web.Response:
        await self.recover(request.match_info["cluster"])
        return web.json_response({"cluster": request.match_info["cluster"], "up": True})

    async def _node_down(self, request: web.Request) -> web.Response:
        self.node(request.match_info["cluster"], request.match_info["node"], down=True)
        return web.json_response({"node": request.match_info["node"], "ready": False})

    async def _node_up(self, request: web.Request) -> web.Response:
        self.node(request.match_info["cluster"], request.match_info["node"], down=False)
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
        nodes = self.labels(request.match_info["cluster"], labels, body.get("node"))
        return web.json_response({"cluster": request.match_info["cluster"], "nodes": nodes})

    async def _shutdown(self, request: web.Request) -> web.Response:
        asyncio.get_running_loop().call_soon(self.stopped.set)
        return web.json_response({"stopping": True})


async def serve(
    fleet: Fleet, directory: Path, *, start_delay: float, heartbeat_seconds: float, **sim_options: Any
) -> None:
    """Run a federation until SIGTERM/SIGINT or a shutdown request (sim_options: node timing
    flags node_monitor_grace_period, default_*_toleration_seconds; None means the default)."""
    host = FederationHost(
        fleet,
        directory,
        start_delay=start_delay,
        heartbeat_seconds=heartbeat_seconds,
        **{k: v for k, v in sim_options.items() if v is not None},
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, host.stopped.set)
    directory.mkdir(parents=True, exist_ok=True)
    _write_private(directory / PID_FILE, f"{os.getpid()}\n")
    try:
        await host.start()
        log.info(
            "testbed %s: %d clusters serving; control endpoint %s",
            fleet.name,
            len(host.clusters),
            host.admin_url,
        )
        await host.stopped.wait()
    finally:
        await host.stop()
        with contextlib.suppress(FileNotFoundError):
            (directory / PID_FILE).unlink()
        log.info("testbed %s stopped", fleet.name)
