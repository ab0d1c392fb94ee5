"""Issue 37: ``qonnect plan --fail X`` says what the controller's heal then does when X fails,
on emulated clusters (the kube engine: test_whatif_heal_kube.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _controller_stack import Stack
from _whatif_heal import federation, whatif_matches_the_heal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = federation(tmp_path_factory.mktemp("whatif"), "emulator")
    try:
        yield stack
    finally:
        stack.close()


def test_plan_fail_is_what_the_controller_does_when_the_cluster_fails(fed: Stack):
    print("emulator:", whatif_matches_the_heal(fed))
