"""The real engine of the testbed: real Kubernetes control planes with simulated kubelets.

``qonnect testbed up --engine kube`` runs, per cluster, etcd, kube-apiserver (TLS, Node,RBAC),
kube-controller-manager and kube-scheduler built from the k8s.io/kubernetes release pinned in
kube/go.mod, and simulated kubelets (kubelet.py) on its nodes. It is the reference the emulator
is checked against (tests/conformance); see docs/testbed.md, "The real engine".

``start_federation`` is the Python entry point for tests: it runs the same ``serve`` process as
the CLI and returns a handle over its control endpoint.
"""

from qonnect_testbed.kube.binaries import KUBE_VERSION, BinariesError, ensure_binaries
from qonnect_testbed.kube.handle import KubeEngineError, KubeFederation, start_federation

__all__ = [
    "KUBE_VERSION",
    "BinariesError",
    "KubeEngineError",
    "KubeFederation",
    "ensure_binaries",
    "start_federation",
]
