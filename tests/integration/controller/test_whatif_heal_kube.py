"""Issue 37 on real API servers (``--engine kube``): ``qonnect plan --fail X`` says what the
controller's heal then does when X fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _controller_stack import Stack
from _whatif_heal import federation, whatif_matches_the_heal

pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def kube_fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = federation(tmp_path_factory.mktemp("whatif-kube"), "kube")
    try:
        yield stack
    finally:
        stack.close()


def test_plan_fail_is_what_the_controller_does_on_real_api_servers(kube_fed: Stack):
    print("kube:", whatif_matches_the_heal(kube_fed))
