"""The fence check the controller's migration runs before each cluster-changing step."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError, fence_guard
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError


class KB:
    def __init__(self, fence: dict | Exception) -> None:
        self.fence = fence
        self.asked = 0

    def get_fence(self) -> dict:
        self.asked += 1
        if isinstance(self.fence, Exception):
            raise self.fence
        return self.fence


class Cluster:
    """Records writes; serves every kind, holds nothing."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def resource(self, api_version: str, kind: str) -> object:
        return object()

    def get(self, *args: object, **kwargs: object) -> None:
        return None

    def list(self, *args: object, **kwargs: object) -> list:
        return []

    def apply(self, obj: dict, dry_run: bool = False) -> dict:
        self.writes.append(f"apply {obj['kind']}")
        return obj

    def delete(self, *args: object, **kwargs: object) -> bool:
        self.writes.append("delete")
        return True


def test_no_token_no_check():
    assert fence_guard(KB({"term": 9, "seq": 9}), None) is None


def test_current_token_passes_and_newer_fence_stops():
    token = {"term": 3, "seq": 7}
    fence_guard(KB({"term": 3, "seq": 7}), token)("apply")
    fence_guard(KB({"term": 2, "seq": 99}), token)("apply")
    with pytest.raises(FencedError, match=r"before switch.*term 4"):
        fence_guard(KB({"term": 4, "seq": 1}), token)("switch")


def test_unreachable_kb_stops_the_run():
    with pytest.raises(FencedError, match="cannot check"):
        fence_guard(KB(KBError(0, "connection refused")), {"term": 1, "seq": 1})("prune")


def test_deployer_checks_the_fence_before_it_changes_a_cluster():
    cluster = Cluster()
    kb = KB({"term": 5, "seq": 1})
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    deployer = Deployer(
        "shop",
        "shop",
        {"web": [manifest]},
        {"web": [{"cluster": "edge-1"}]},
        {"edge-1": Target("edge-1", "/nonexistent")},
        client_factory=lambda t: cluster,
        wait=False,
        before_step=fence_guard(kb, {"term": 4, "seq": 9}),
    )
    with pytest.raises(FencedError, match="before apply"):
        deployer.run()
    assert cluster.writes == [] and kb.asked == 1


class VersionedKB(KB):
    """The fence, and the application's stored version (issue 34.4)."""

    def __init__(self, version: int) -> None:
        super().__init__({"term": 3, "seq": 7})
        self.version = version

    def get_application(self, name: str) -> dict:
        return {"name": name, "version": self.version}


def test_a_newer_stored_version_supersedes_the_run():
    """A user's deploy stored version 4 while the controller's run places version 3: the run
    stops before its next cluster-changing step, naming the version that superseded it."""
    token = {"term": 3, "seq": 7}
    kb = VersionedKB(3)
    guard = fence_guard(kb, token, "shop", 3)
    guard("apply")  # still the newest: goes on
    kb.version = 4
    with pytest.raises(FencedError, match=r"^superseded by version 4: stopped before switch"):
        guard("switch")
    fence_guard(kb, token)("switch")  # without a version (a removal): the fence only
