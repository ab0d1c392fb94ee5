"""The real engine's testbed process: real control planes per cluster, the emulator's interface.

It is the emulator's FederationHost (same directory layout, federation file, state file and
control endpoint, so ``qonnect testbed down/status/fail/recover/node-down/node-up/set`` are the
same commands) with each cluster being a ControlPlane (real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) plus simulated kubelets. Each cluster also gets the
restricted identity of docs/testbed.md for 403 tests, and the least-privilege agent and deploy
identities of docs/rbac/ (identities.py), applied from those files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from qonnect_testbed import federation, identities, kubeconfig, pki
from qonnect_testbed.control import ControlError, run_until_stopped, write_private
from qonnect_testbed.federation import FEDERATION_FILE, STATE_FILE
from qonnect_testbed.fleet import ClusterSpec, Fleet
from qonnect_testbed.kube.api import KubeApiError
from qonnect_testbed.kube.binaries import KUBE_VERSION
from qonnect_testbed.kube.control_plane import ControlPlane, ControlPlaneError, Timing
from qonnect_testbed.kube.kubelet import LEASE_RENEW, FaultPolicy, Kubelets
from qonnect_testbed.kube.volumes import Provisioner
from qonnect_testbed.server import FederationHost

log = logging.getLogger(__name__)
RESTRICTED_SA = "qonnect-restricted"
RESTRICTED_TOKEN_SECONDS = 365 * 24 * 3600


_COLLECTIONS = {
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Namespace": "/api/v1/namespaces",
}


def _collection(obj: dict[str, Any]) -> str:
    """The REST collection an object of docs/rbac/ is created in."""
    kind = obj["kind"]
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{obj['metadata']['namespace']}/serviceaccounts"
    return _COLLECTIONS[kind]


class KubeCluster:
    """One real cluster: its control plane, its simulated kubelets and volume provisioner."""

    def __init__(self, spec: ClusterSpec, plane: ControlPlane, policy: FaultPolicy) -> None:
        self.spec = spec
        self.plane = plane
        # A live node must renew well within the grace period, or a shortened grace period
        # (tests) would make every node flap - and a zone with every node down is not evicted.
        renew = min(LEASE_RENEW, plane.timing.node_monitor_grace_period / 4)
        self.kubelets = Kubelets(plane.api, spec, policy, KUBE_VERSION, renew_seconds=max(0.5, renew))
        self.provisioner = Provisioner(plane.api, spec.name)
        self.address = plane.address
        self.restricted_kubeconfig: Path | None = None
        self.role_kubeconfigs: dict[str, Path] = {}  # role -> kubeconfig (identities.py)

    @property
    def port(self) -> int:
        return self.plane.port

    @property
    def up(self) -> bool:
        return self.plane.up

    async def summary(self) -> dict[str, Any]:
        """Counts for ``qonnect testbed status`` read from the real API (zeros while it is down)."""
        counts: dict[str, Any] = {
            "nodes": len(self.spec.nodes),
            "nodes_ready": 0,
            "pods": 0,
            "pods_running": 0,
            "pods_pending": 0,
            "deployments": 0,
        }
        if self.up:
            with contextlib.suppress(KubeApiError):
                nodes = (await self.plane.api.get("/api/v1/nodes", timeout=5)).get("items") or []
                pods = (await self.plane.api.get("/api/v1/pods", timeout=5)).get("items") or []
                deps = (await self.plane.api.get("/apis/apps/v1/deployments", timeout=5)).get("items") or []
                counts.update(
                    nodes=len(nodes),
                    nodes_ready=sum(
                        1
                        for n in nodes
                        if any(
                            c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (n.get("status") or {}).get("conditions") or []
                        )
                    ),
                    pods=len(pods),
                    pods_running=sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"),
                    pods_pending=sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Pending"),
                    deployments=len(deps),
                )
        counts["nodes_down"] = sorted(self.kubelets.down)
        counts["engine"] = "kube"
        counts["rss_bytes"] = self.plane.rss_bytes()
        counts["pids"] = self.plane.pids()
        return counts


class KubeFederationHost(FederationHost):
    """All real clusters of a fleet, their files under one directory, the control endpoint."""

    def __init__(
        self,
        fleet: Fleet,
        directory: Path,
        bin_dir: Path,
        policy: FaultPolicy,
        *,
        timing: Timing,
        timeout: float = 180.0,
    ) -> None:
        super().__init__(fleet, directory)
        self.bin_dir = bin_dir
        self.policy = policy
        self.timing = timing
        self.timeout = timeout
        self.clusters: dict[str, KubeCluster] = {}  # type: ignore[assignment]
        self.started_seconds = 0.0

    async def start(self) -> None:
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        pki_dir = self.directory / "pki"
        ca = pki.CertificateAuthority.create()
        ca_file = ca.save(pki_dir)
        for i, spec in enumerate(self.fleet.clusters):
            plane = ControlPlane(
                spec.name,
                federation.cluster_address(i),
                self.directory / "clusters" / spec.name,
                self.bin_dir,
                ca,
                ca_file,
                self.timing,
            )
            self.clusters[spec.name] = KubeCluster(spec, plane, self.policy)
        deadline = time.monotonic() + self.timeout
        await asyncio.gather(*(c.plane.start(self.timeout) for c in self.clusters.values()))
        kubeconfigs: dict[str, Path] = {}
        for name, cluster in self.clusters.items():
            doc = kubeconfig.build(name, cluster.plane.server, cluster.plane.admin_token, ca.cert_pem)
            kubeconfigs[name] = kubeconfig.write(self.directory / "kubeconfigs" / f"{name}.yaml", doc)
        await asyncio.gather(
            *(self._prepare_cluster(c, ca.cert_pem, deadline) for c in self.clusters.values())
        )
        endpoints = {n: (c.address, c.port) for n, c in self.clusters.items()}
        roles = {r: {n: c.role_kubeconfigs[r] for n, c in self.clusters.items()} for r in identities.ROLES}
        doc = federation.document(self.fleet, endpoints, kubeconfigs, ca_file, role_kubeconfigs=roles)
        doc["engine"] = "kube"
        doc["kubernetes_version"] = KUBE_VERSION
        for entry in doc["clusters"]:
            entry["restricted_kubeconfig"] = str(self.clusters[entry["name"]].restricted_kubeconfig)
        federation.write(self.directory / FEDERATION_FILE, doc)
        self.started_seconds = time.monotonic() - started
        await self._start_admin()
        state = json.loads((self.directory / STATE_FILE).read_text(encoding="utf-8"))
        state.update(
            engine="kube",
            kubernetes_version=KUBE_VERSION,
            bin_dir=str(self.bin_dir),
            start_seconds=round(self.started_seconds, 2),
        )
        write_private(self.directory / STATE_FILE, json.dumps(state, indent=2))

    async def _prepare_cluster(self, cluster: KubeCluster, ca_pem: bytes, deadline: float) -> None:
        """Nodes registered, the default StorageClass and its provisioner, the restricted
        identity made, the default service account there."""
        await cluster.kubelets.start()
        await cluster.provisioner.start()
        cluster.restricted_kubeconfig = await self._restricted(cluster, ca_pem)
        for role in identities.ROLES:
            cluster.role_kubeconfigs[role] = await self._least_privilege(cluster, role, ca_pem)
        api = cluster.plane.api
        while True:  # pods cannot be created in a namespace before its default service account
            try:
                await api.get("/api/v1/namespaces/default/serviceaccounts/default")
                return
            except KubeApiError as exc:
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"cluster {cluster.spec.name}: the default service account "
                        f"did not appear ({exc.message})"
                    ) from None
            await asyncio.sleep(0.3)

    async def _restricted(self, cluster: KubeCluster, ca_pem: bytes) -> Path:
        """The restricted identity (read-only on a few kinds in 'default') and its kubeconfig."""
        api = cluster.plane.api
        ns = "/api/v1/namespaces/default"
        await api.ensure(
            f"{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RESTRICTED_SA}},
        )
        rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
        await api.ensure(
            f"{rbac}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": RESTRICTED_SA},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "services", "configmaps"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                ],
            },
        )
        await api.ensure(
            f"{rbac}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": RESTRICTED_SA},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RESTRICTED_SA},
                "subjects": [{"kind": "ServiceAccount", "name": RESTRICTED_SA, "namespace": "default"}],
            },
        )
        return await self._account_kubeconfig(cluster, "default", RESTRICTED_SA, "restricted", ca_pem)

    async def _least_privilege(self, cluster: KubeCluster, role: str, ca_pem: bytes) -> Path:
        """docs/rbac/<role>-clusterrole.yml applied (as a user would), and a kubeconfig with a
        token of its ServiceAccount."""
        api = cluster.plane.api
        for obj in identities.rbac_objects(role):
            await api.ensure(_collection(obj), obj)
        namespace, account = identities.service_account(role)
        return await self._account_kubeconfig(cluster, namespace, account, role, ca_pem)

    async def _account_kubeconfig(
        self, cluster: KubeCluster, namespace: str, account: str, label: str, ca_pem: bytes
    ) -> Path:
        """A TokenRequest for the ServiceAccount, written as DIR/kubeconfigs/<label>/<cluster>.yaml."""
        answer = await cluster.plane.api.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": RESTRICTED_TOKEN_SECONDS},
            },
        )
        doc = kubeconfig.build(cluster.spec.name, cluster.plane.server, answer["status"]["token"], ca_pem)
        user = f"{cluster.spec.name}-{label}"
        doc["users"][0]["name"] = user
        doc["contexts"][0]["context"]["user"] = user
        return kubeconfig.write(self.directory / "kubeconfigs" / label / f"{cluster.spec.name}.yaml", doc)

    async def stop(self) -> None:
        for cluster in self.clusters.values():
            await cluster.kubelets.stop()
            await cluster.provisioner.stop()
        await asyncio.gather(*(c.plane.stop() for c in self.clusters.values()), return_exceptions=True)
        await self.control.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / STATE_FILE).unlink()

    # ----------------------------------------------------------------- control operations

    async def status(self) -> dict[str, Any]:
        summaries = await asyncio.gather(*(c.summary() for c in self.clusters.values()))
        return {
            "profile": self.fleet.name,
            "pid": os.getpid(),
            "engine": "kube",
            "kubernetes_version": KUBE_VERSION,
            "start_seconds": round(self.started_seconds, 2),
            "clusters": [
                {
                    "name": name,
                    "tier": c.spec.tier,
                    "location": c.spec.location,
                    "server": c.plane.server,
                    "up": c.up,
                    **summary,
                }
                for (name, c), summary in zip(self.clusters.items(), summaries, strict=True)
            ],
        }

    async def fail(self, name: str) -> None:
        await self.cluster(name).plane.fail()  # type: ignore[attr-defined]

    async def recover(self, name: str) -> None:
        try:
            await self.cluster(name).plane.recover()  # type: ignore[attr-defined]
        except ControlPlaneError as exc:
            raise ControlError(500, str(exc)) from None

    async def node(self, cluster: str, node: str, down: bool) -> None:
        kubelets: Kubelets = self.cluster(cluster).kubelets  # type: ignore[attr-defined]
        try:
            await (kubelets.set_down(node) if down else kubelets.set_up(node))
        except KeyError as exc:
            raise ControlError(404, str(exc.args[0])) from None
        except KubeApiError as exc:
            raise ControlError(503, f"cluster {cluster}: {exc.message}") from None

    async def labels(self, cluster: str, labels: dict[str, str | None], node: str | None) -> list[str]:
        host: KubeCluster = self.cluster(cluster)  # type: ignore[assignment]
        names = [node] if node else [n.name for n in host.spec.nodes]
        if node and node not in {n.name for n in host.spec.nodes}:
            raise ControlError(
                404,
                f"cluster {cluster} has no node {node!r} "
                f"(nodes: {', '.join(n.name for n in host.spec.nodes)})",
            )
        for name in names:
            try:
                await host.plane.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
            except KubeApiError as exc:
                raise ControlError(exc.code if exc.code in (404, 422) else 503, exc.message) from None
        return names


async def serve(fleet: Fleet, directory: Path, **options: Any) -> None:
    """Run real clusters until SIGTERM/SIGINT or a shutdown request (``options``: those of
    :class:`KubeFederationHost`: bin_dir, policy, timing, timeout)."""
    host = KubeFederationHost(fleet, directory, **options)
    await run_until_stopped(
        host,
        directory,
        fleet.name,
        lambda: (
            f"(kube {KUBE_VERSION}) {len(host.clusters)} clusters serving in "
            f"{host.started_seconds:.1f} s; control endpoint {host.admin_url}"
        ),
    )
