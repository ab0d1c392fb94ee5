"""Issue 22.5 on real API servers (``--engine kube``): a Deployment deleted out of band is
applied again by the leader's self-heal within 30 s, with a ``controller.restored`` event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _controller_stack import Stack
from _drift import deleted_and_restored, running

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def kube_fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The same on real API servers (``--engine kube``)."""
    with running(tmp_path_factory.mktemp("drift-kube"), "kube") as stack:
        yield stack


def test_deleted_deployment_is_back_within_30s_on_real_api_servers(kube_fed: Stack):
    print(f"kube: deleted Deployment restored after {deleted_and_restored(kube_fed):.1f}s")
