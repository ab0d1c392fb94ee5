"""The emulator's object store seen from outside: selector semantics (matched by the shared
module_utils/labels.py), what it defaults, and what it refuses."""

from __future__ import annotations

import pytest
from qonnect_testbed.store import ApiError, Store


def _pod(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
    }


@pytest.fixture
def store() -> Store:
    s = Store("unit")
    for name, labels in (("none", {}), ("one", {"n": "1"}), ("five", {"n": "5"}), ("text", {"n": "x"})):
        s.create("pods", "default", _pod(name, labels))
    return s


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("n=1", ["one"]),
        ("n==5", ["five"]),
        ("n!=1", ["five", "none", "text"]),  # absent keys match != and notin, as in Kubernetes
        ("n in (1,5)", ["five", "one"]),
        ("n notin (1)", ["five", "none", "text"]),
        ("n", ["five", "one", "text"]),
        ("!n", ["none"]),
        ("n>1", ["five"]),  # integers; a non-integer value never matches > or <
        ("n<5", ["one"]),
        ("n>0,n<5", ["one"]),
        ("n in (1,5),n!=5", ["one"]),
    ],
)
def test_label_selectors_match_as_kubernetes_does(store: Store, selector: str, names: list[str]) -> None:
    items, _rv = store.list("pods", "default", label_selector=selector)
    assert sorted(o["metadata"]["name"] for o in items) == names


@pytest.mark.parametrize("selector", ["n>x", "n in (a b)", "=1", "n,,m"])
def test_malformed_label_selector_is_400(store: Store, selector: str) -> None:
    with pytest.raises(ApiError) as err:
        store.list("pods", "default", label_selector=selector)
    assert err.value.code == 400 and "unable to parse requirement" in err.value.message


def test_field_selector_on_unsupported_field_is_400(store: Store) -> None:
    with pytest.raises(ApiError) as err:
        store.list("pods", None, field_selector="spec.bogus=1")
    assert err.value.code == 400 and "field label not supported: spec.bogus" in err.value.message
    items, _rv = store.list("pods", None, field_selector="status.phase=Pending,metadata.name!=one")
    assert sorted(o["metadata"]["name"] for o in items) == ["five", "none", "text"]


def test_defaults_of_a_pod_with_limits_only(store: Store) -> None:
    pod = _pod("limited")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    created = store.create("pods", "default", pod)
    container = created["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert created["status"]["qosClass"] == "Guaranteed"
    assert created["spec"]["serviceAccountName"] == "default"


@pytest.mark.parametrize("data", [{"key": 5}, ["not", "a", "map"]])
def test_secret_data_that_is_not_a_map_of_strings_is_422(store: Store, data: object) -> None:
    """Was a TypeError/AttributeError (a 500) before the store was split."""
    with pytest.raises(ApiError) as err:
        store.create("secrets", "default", {"metadata": {"name": "s"}, "data": data})
    assert err.value.code == 422
    assert "data: Invalid value: must be a map of string keys to string values" in err.value.message


def test_workload_validation_lists_every_cause(store: Store) -> None:
    body = {
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "1"}}, "replicas": -1, "template": {"spec": {}}},
    }
    with pytest.raises(ApiError) as err:
        store.create("deployments", "default", body)
    fields = [c["field"] for c in err.value.details["causes"]]
    assert fields == ["spec.template.metadata.labels", "spec.replicas", "spec.template.spec.containers"]
