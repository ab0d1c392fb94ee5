"""The testbed process: many emulated clusters in one asyncio loop, plus a control endpoint.

Each cluster has its Store, its simulation controllers and its API server app, served over TLS
on its own loopback address (127.0.0.2 upward) and a free port. ``fail`` closes the cluster's
listener and its open connections, so clients get "connection refused" as from a dead API
server; ``recover`` listens again on the same address and port with the state kept.

The control endpoint (control.py, shared with the real engine) serves the CLI's status, fail,
recover, node-down, node-up, set and shutdown. Tokens never appear in logs or in the federation
file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from qonnect_testbed import federation, identities, kubeconfig, latency, pki
from qonnect_testbed.apiserver import make_app
from qonnect_testbed.apiserver.authz import RESTRICTED, Grant
from qonnect_testbed.control import ControlEndpoint, ControlError, run_until_stopped
from qonnect_testbed.federation import FEDERATION_FILE, STATE_FILE
from qonnect_testbed.fleet import ClusterSpec, Fleet
from qonnect_testbed.sim import ClusterSim
from qonnect_testbed.store import ApiError, Store

log = logging.getLogger(__name__)
K8S_VERSION = "v1.30.0"


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
        # role -> token of the documented least-privilege identities (identities.py)
        self.role_tokens = {role: secrets.token_urlsafe(32) for role in identities.ROLES}
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
            grants={
                self.restricted_token: RESTRICTED,
                **{t: Grant.cluster_role(role) for role, t in self.role_tokens.items()},
            },
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
            if handler.transport is not None:
                handler.transport.abort()  # at once, as a dead process's sockets (no TLS goodbye)
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
        self.control = ControlEndpoint(self)
        self.stopped = asyncio.Event()

    @property
    def admin_url(self) -> str:
        return self.control.url

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
        roles: dict[str, dict[str, Path]] = {role: {} for role in identities.ROLES}
        for name, host in self.clusters.items():
            server = f"https://{host.address}:{host.port}"
            doc = kubeconfig.build(name, server, host.token, ca.cert_pem)
            kubeconfigs[name] = kubeconfig.write(self.directory / "kubeconfigs" / f"{name}.yaml", doc)
            doc = kubeconfig.build(name, server, host.restricted_token, ca.cert_pem)
            restricted[name] = kubeconfig.write(
                self.directory / "kubeconfigs" / "restricted" / f"{name}.yaml", doc
            )
            for role, role_token in host.role_tokens.items():
                doc = kubeconfig.build(name, server, role_token, ca.cert_pem)
                roles[role][name] = kubeconfig.write(
                    self.directory / "kubeconfigs" / role / f"{name}.yaml", doc
                )
        endpoints = {n: (h.address, h.port) for n, h in self.clusters.items()}
        federation.write(
            self.directory / FEDERATION_FILE,
            federation.document(self.fleet, endpoints, kubeconfigs, ca_file, restricted, roles),
        )
        await self._start_admin()

    async def _start_admin(self) -> None:
        await self.control.start(self.directory, self.fleet.name, len(self.clusters))

    async def stop(self) -> None:
        for host in self.clusters.values():
            await host.stop()
        await self.control.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / STATE_FILE).unlink()

    # ----------------------------------------------------------------- control operations

    def cluster(self, name: str) -> ClusterHost:
        try:
            return self.clusters[name]
        except KeyError:
            raise ControlError(404, f"no cluster {name!r} (clusters: {', '.join(self.clusters)})") from None

    async def status(self) -> dict[str, Any]:
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

    async def node(self, cluster: str, node: str, down: bool) -> None:
        sim = self.cluster(cluster).sim
        try:
            (sim.nodes.set_down if down else sim.nodes.set_up)(node)
        except ApiError as exc:
            raise ControlError(exc.code, exc.message) from None

    async def labels(self, cluster: str, labels: dict[str, str | None], node: str | None) -> list[str]:
        sim = self.cluster(cluster).sim
        try:
            return sim.nodes.set_labels(labels, node)
        except ApiError as exc:
            raise ControlError(exc.code if exc.code != 409 else 422, exc.message) from None


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
    await run_until_stopped(
        host,
        directory,
        fleet.name,
        lambda: f"{len(host.clusters)} clusters serving; control endpoint {host.admin_url}",
    )
