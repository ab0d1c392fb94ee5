"""One federation for the adversarial suite: the paper testbed, a KB, one agent per cluster.

Real processes, as in tests/integration/ansible (whose helpers it reuses); module-scoped, so it
is stopped before another directory's federation starts.
"""

from __future__ import annotations

import pytest
from adversarial_harness import cluster_clients, paper_federation


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """The nine-cluster paper testbed with its clusters registered and reporting to a KB."""
    yield from paper_federation(tmp_path_factory.mktemp("qonnect-adversarial"))


@pytest.fixture(scope="module")
def dyn(federation):
    """dyn(cluster) -> a kubernetes DynamicClient reading that cluster through its kubeconfig."""
    from kubernetes import dynamic

    return cluster_clients(federation, dynamic.DynamicClient)
