"""What the self-heal pass's shared reads rely on in a cluster's API (k8s/shared_reads.py), held
alike by the real engine, the emulator and the unit tests' in-memory fake (tests/support/
memory_cluster.py): a labelled list's undecoded body decodes to the labelled objects only, each
with its apiVersion and kind; a write the list does not hold moves the list's own
resourceVersion but not its items' bytes, so their digest stays; a write to a listed object
changes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.shared_reads import SharedReads, _items_digest
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL
from qonnect_testbed.kube import KubeFederation
from support.federation import started_testbed
from support.memory_cluster import MemoryCluster

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("kube-tiers")]

CLUSTER = "cloud-1"


@pytest.fixture(scope="module", params=["memory", "emulator", "kube"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryCluster(CLUSTER, [])
        return
    if request.param == "kube":
        tiers: KubeFederation = request.getfixturevalue("tiers")
        yield get_client(CLUSTER, str(tiers.kubeconfig(CLUSTER)))
        return
    directory = tmp_path_factory.mktemp("contract-emulator")
    with started_testbed(directory, "--profile", "tiers", "--clusters", "1", "--start-delay", "0.3") as doc:
        (entry,) = [c for c in doc["clusters"] if c["name"] == CLUSTER]
        yield get_client(CLUSTER, entry["kubeconfig"])


def config_map(name: str, namespace: str, labelled: bool, value: str) -> dict:
    meta: dict = {"name": name, "namespace": namespace}
    if labelled:
        meta["labels"] = {APP_LABEL: "contract"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}


def test_a_labelled_list_is_digested_by_its_items_alone(client: Any) -> None:
    namespace = f"contract-{int(time.time() * 1000) % 10**8}"
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    client.apply(config_map("ours", namespace, True, "1"))
    client.apply(config_map("theirs", namespace, False, "1"))

    def labelled() -> bytes:
        return client.list_body("v1", "ConfigMap", None, label_selector=APP_LABEL)

    first = labelled()
    items = [
        o for o in client.list_items(first, "v1", "ConfigMap") if o["metadata"]["namespace"] == namespace
    ]
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in items] == [
        ("v1", "ConfigMap", "ours")
    ]

    client.apply(config_map("theirs", namespace, False, "2"))  # a write no labelled list holds
    second = labelled()
    assert second != first  # the list's own resourceVersion moved with it
    assert _items_digest(second) == _items_digest(first)

    client.apply(config_map("ours", namespace, True, "2"))
    assert _items_digest(labelled()) != _items_digest(first)

    empty = client.list_body("v1", "ConfigMap", f"{namespace}-none", label_selector=APP_LABEL)
    assert client.list_items(empty, "v1", "ConfigMap") == []


def test_shared_reads_decode_a_kind_again_only_when_its_items_changed(client: Any) -> None:
    namespace = f"contract-r-{int(time.time() * 1000) % 10**8}"
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    client.apply(config_map("ours", namespace, True, "1"))
    known: dict = {}
    one = SharedReads(client, known)
    assert one.get("v1", "ConfigMap", "ours", namespace)["data"] == {"v": "1"}
    held = known[("v1", "ConfigMap")]
    client.apply(config_map("theirs", namespace, False, "1"))
    two = SharedReads(client, known)
    assert two.digest("v1", "ConfigMap") == held[0] and known[("v1", "ConfigMap")][1] is held[1]
    client.apply(config_map("ours", namespace, True, "2"))
    three = SharedReads(client, known)
    assert three.get("v1", "ConfigMap", "ours", namespace)["data"] == {"v": "2"}
    assert three.digest("v1", "ConfigMap") != held[0]
