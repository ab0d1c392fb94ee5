"""Fixtures for the k8s module_utils unit tests: an in-memory stand-in for a cluster's API."""

from __future__ import annotations

import pytest
from support.memory_cluster import MemoryCluster


@pytest.fixture
def fleet():
    log: list = []
    clusters = {name: MemoryCluster(name, log) for name in ("c1", "c2", "c3")}
    return clusters, log
