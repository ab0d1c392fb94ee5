"""Fixtures of the Ansible integration tests: the paper testbed, a KB, one agent per cluster.

Everything runs as real processes (`qonnect testbed up`, `qonnect kb serve`, `qonnect agent`);
the tests drive it with real `ansible-playbook`, `ansible-inventory` and ansible-runner and
read the clusters back through the Kubernetes API. Every process started here is stopped at the
end of the session, also when a test fails.
"""

from __future__ import annotations

import pytest
from ansible_federation import cluster_clients, paper_federation


@pytest.fixture(scope="session")
def federation(tmp_path_factory):
    """The nine-cluster paper testbed with its clusters registered and reporting to a KB."""
    yield from paper_federation(tmp_path_factory.mktemp("qonnect-ansible"))


@pytest.fixture(scope="session")
def k8s(federation):
    """k8s(cluster) -> (CoreV1Api, AppsV1Api) reading that cluster through its kubeconfig."""
    from kubernetes import client

    return cluster_clients(federation, lambda api: (client.CoreV1Api(api), client.AppsV1Api(api)))
