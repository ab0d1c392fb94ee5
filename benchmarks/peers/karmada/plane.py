"""A Karmada control plane on the real engine's kube-apiserver + etcd, members joined in push mode.

The host is the testbed's own ``ControlPlane`` (etcd, kube-apiserver, and a kube-controller-
manager limited to the controllers Karmada's install runs: namespace, garbage collector, ...; no
kube-scheduler, as in Karmada's Helm chart). Karmada's CRDs come from the module cache of the
pinned version (charts/karmada/_crds/bases). Karmada serves ``cluster.karmada.io`` through its
aggregated API server, which is not built here: a CRD with the same group, version and status
subresource stands in for it (the controllers only get, list, watch and update Clusters).
``karmada-webhook`` runs for its defaulting (permanent ids of policies, bindings and works) with
Karmada's own webhook configuration, its service URL replaced by the webhook's local address.
Joining is what ``karmadactl join`` does in push mode: a Secret with the member's token and CA
in ``karmada-cluster`` and a Cluster object with ``syncMode: Push`` and the member's endpoint.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from members import Api, ApiError, Member
from qonnect_testbed import pki
from qonnect_testbed.kube.control_plane import ControlPlane, Timing, free_port
from qonnect_testbed.kube.processes import Child

HOST_ADDRESS = "127.0.0.250"
HOST_CONTROLLERS = "namespace,garbagecollector,serviceaccount-token,clusterrole-aggregation"
CLUSTER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusters.cluster.karmada.io"},
    "spec": {
        "group": "cluster.karmada.io",
        "scope": "Cluster",
        "names": {"plural": "clusters", "singular": "cluster", "kind": "Cluster", "listKind": "ClusterList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
# Karmada's documented failover switches (v1.16: cluster failover is off by default).
TAINT_POLICY = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "ClusterTaintPolicy",
    "metadata": {"name": "evict-not-ready"},
    "spec": {
        "addOnConditions": [{"conditionType": "Ready", "operator": "NotIn", "statusValues": ["True"]}],
        "removeOnConditions": [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}],
        "taints": [{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"}],
    },
}


class Host(ControlPlane):
    """etcd + kube-apiserver + a restricted kube-controller-manager: Karmada's API server."""

    def _commands(self, files: dict[str, Path]) -> dict[str, list[str]]:
        commands = super()._commands(files)
        del commands["kube-scheduler"]
        commands["kube-controller-manager"].append(f"--controllers={HOST_CONTROLLERS}")
        self.kubeconfig = files["kubeconfig"]
        return commands

    async def start(self, timeout: float) -> None:
        files = self._prepare()
        for name, argv in self._commands(files).items():
            self.children[name] = Child(name, argv, self.directory / "logs" / f"{name}.log")
        deadline = time.monotonic() + timeout
        self.children["etcd"].start()
        self.children["kube-apiserver"].start()
        await self.wait_ready(deadline)
        self.children["kube-controller-manager"].start()


class Karmada:
    """The host plus karmada-controller-manager, karmada-scheduler and karmada-webhook."""

    def __init__(self, directory: Path, kube_bin: Path, karmada_bin: Path, crd_dir: Path) -> None:
        self.directory = directory
        self.kube_bin, self.bin, self.crd_dir = kube_bin, karmada_bin, crd_dir
        self.loop = asyncio.new_event_loop()
        self.ca = pki.CertificateAuthority.create("karmada-benchmark-ca")
        ca_file = self.ca.save(directory / "pki")
        self.host = Host(
            "karmada-host", HOST_ADDRESS, directory / "host", kube_bin, self.ca, ca_file, Timing()
        )
        self.api = Api(self.host.server, self.host.admin_token, self.ca.cert_pem, timeout=10)
        self.components: dict[str, Child] = {}
        self.flags: list[str] = []

    # -- life ------------------------------------------------------------------------------------

    def start(self, timeout: float = 300) -> None:
        self.loop.run_until_complete(self.host.start(timeout))
        for sub in (
            "policy",
            "work",
            "config",
            "apps",
            "autoscaling",
            "networking",
            "multicluster",
            "remedy",
        ):
            for crd in sorted((self.crd_dir / sub).glob("*.yaml")):
                self.kubectl("apply", "--server-side", "-f", str(crd))
        self.apply(CLUSTER_CRD)
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
        for ns in ("karmada-system", "karmada-cluster"):
            self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.start_webhook()
        self.start_scheduler()

    def pids(self) -> dict[str, int]:
        out = {f"host-{n}": p for n, p in self.host.pids().items()}
        for name, child in self.components.items():
            if child.running and child.proc is not None:
                out[name] = child.proc.pid
        return out

    def stop(self) -> None:
        for child in self.components.values():
            child.kill(15, 10.0)
        self.loop.run_until_complete(self.host.stop())
        self.loop.close()

    # -- components ------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> None:
        child = Child(name, [str(self.bin / name), *argv], self.directory / "logs" / f"{name}.log")
        child.start()
        self.components[name] = child

    def start_webhook(self) -> None:
        a = HOST_ADDRESS
        port = free_port(a)
        cert, key = self.ca.issue_server("karmada-webhook", [a])
        certs = self.directory / "webhook-certs"
        pki.write_server_pair(certs, "tls", cert, key)
        self._start(
            "karmada-webhook",
            [
                f"--kubeconfig={self.host.kubeconfig}",
                f"--bind-address={a}",
                f"--secure-port={port}",
                f"--cert-dir={certs}",
                f"--metrics-bind-address={a}:{free_port(a)}",
                f"--health-probe-bind-address={a}:{free_port(a)}",
                "--allow-no-execute-taint-policy=true",
                "--v=1",
            ],
        )
        wait_port(a, port, 120, self.components["karmada-webhook"])
        source = (self.crd_dir.parents[3] / "artifacts" / "deploy" / "webhook-configuration.yaml").read_text()
        config = source.replace("https://karmada-webhook.karmada-system.svc:443", f"https://{a}:{port}")
        config = config.replace("{{caBundle}}", base64.b64encode(self.ca.cert_pem).decode())
        self.kubectl("apply", "-f", "-", stdin=config)

    def start_controller_manager(self, flags: list[str]) -> None:
        """(Re)start karmada-controller-manager with these extra flags (the tuned run's)."""
        old = self.components.pop("karmada-controller-manager", None)
        if old is not None:
            old.kill(15, 10.0)
        a = HOST_ADDRESS
        self.flags = flags
        self._start(
            "karmada-controller-manager",
            [
                f"--kubeconfig={self.host.kubeconfig}",
                f"--metrics-bind-address={a}:{free_port(a)}",
                f"--health-probe-bind-address={a}:{free_port(a)}",
                "--leader-elect=false",
                "--v=1",
                *flags,
            ],
        )

    def start_scheduler(self, flags: list[str] | None = None) -> None:
        old = self.components.pop("karmada-scheduler", None)
        if old is not None:
            old.kill(15, 10.0)
        a = HOST_ADDRESS
        self._start(
            "karmada-scheduler",
            [
                f"--kubeconfig={self.host.kubeconfig}",
                f"--metrics-bind-address={a}:{free_port(a)}",
                f"--health-probe-bind-address={a}:{free_port(a)}",
                "--leader-elect=false",
                "--enable-scheduler-estimator=false",
                "--v=1",
                *(flags or []),
            ],
        )

    # -- objects -----------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 180) -> str:
        done = subprocess.run(
            [str(self.kube_bin / "kubectl"), f"--kubeconfig={self.host.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {args[0]} failed: {done.stderr.strip()[-600:]}")
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl(
            "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        )

    def join(self, member: Member, labels: dict[str, str]) -> None:
        """Push mode, as ``karmadactl join``: credentials Secret + Cluster object."""
        cluster_id = member.api().get("/api/v1/namespaces/kube-system")["metadata"]["uid"]
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": member.name, "namespace": "karmada-cluster"},
            "data": {
                "token": base64.b64encode(member.token.encode()).decode(),
                "caBundle": base64.b64encode(member.ca_pem).decode(),
            },
        }
        ref = {"namespace": "karmada-cluster", "name": member.name}
        cluster = {
            "apiVersion": "cluster.karmada.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": member.name, "labels": labels},
            "spec": {
                "id": cluster_id,
                "syncMode": "Push",
                "apiEndpoint": member.server,
                "secretRef": ref,
                "impersonatorSecretRef": ref,
            },
        }
        self.apply(secret, cluster)

    def clusters_ready(self) -> dict[str, bool]:
        items = self.api.get("/apis/cluster.karmada.io/v1alpha1/clusters")["items"]
        out = {}
        for c in items:
            conds = {x["type"]: x["status"] for x in c.get("status", {}).get("conditions", [])}
            out[c["metadata"]["name"]] = conds.get("Ready") == "True"
        return out

    def taints(self) -> dict[str, list[str]]:
        items = self.api.get("/apis/cluster.karmada.io/v1alpha1/clusters")["items"]
        return {
            c["metadata"]["name"]: [f"{t['key']}:{t['effect']}" for t in c["spec"].get("taints") or []]
            for c in items
        }

    def delete_namespace_objects(self, namespace: str) -> None:
        for kind in ("propagationpolicies.policy.karmada.io", "deployments", "services", "serviceaccounts"):
            try:
                self.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false", "--ignore-not-found")
            except RuntimeError:
                pass

    def bindings(self, namespace: str) -> list[dict[str, Any]]:
        try:
            path = f"/apis/work.karmada.io/v1alpha2/namespaces/{namespace}/resourcebindings"
            items = self.api.get(path)["items"]
        except ApiError:
            return []
        return [
            {
                "name": b["metadata"]["name"],
                "clusters": [c["name"] for c in b["spec"].get("clusters") or []],
                "evicting": [t.get("fromCluster") for t in b["spec"].get("gracefulEvictionTasks") or []],
            }
            for b in items
        ]


def wait_port(address: str, port: int, timeout: float, child: Child) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise RuntimeError(f"{child.name} exited: {child.log_tail()}")
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{child.name} did not listen on {address}:{port} in {timeout:g}s")
