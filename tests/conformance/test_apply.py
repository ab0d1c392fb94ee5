"""Server-side apply: field managers, conflicts, force, and Update managers in conflicts."""

from __future__ import annotations

import pytest
from conformance_engines import status_of
from kubernetes import client

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]
APPLY = "application/apply-patch+yaml"


def _cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _apply(
    core: client.CoreV1Api, ns: str, body: dict, manager: str, force: bool = False
) -> client.V1ConfigMap:
    return core.patch_namespaced_config_map(
        body["metadata"]["name"], ns, body, field_manager=manager, force=force, _content_type=APPLY
    )


def _owned(cm: client.V1ConfigMap) -> dict[tuple[str, str], dict]:
    return {(m.manager, m.operation): m.fields_v1 for m in cm.metadata.managed_fields or []}


def test_apply_creates_and_records_the_manager(engine, ns):
    core = engine.core()
    cm = _apply(core, ns, _cm("ssa", a="1", b="2"), "alice")
    assert cm.data == {"a": "1", "b": "2"}
    assert _owned(cm)[("alice", "Apply")] == {"f:data": {"f:a": {}, "f:b": {}}}


def test_conflict_with_another_appliers_field_is_409_naming_manager_and_field(engine, ns):
    core = engine.core()
    _apply(core, ns, _cm("ssa", a="1"), "alice")
    with pytest.raises(client.ApiException) as err:
        _apply(core, ns, _cm("ssa", a="2"), "bob")
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.a'
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.a"}
    ]
    assert core.read_namespaced_config_map("ssa", ns).data == {"a": "1"}


def test_same_value_is_shared_ownership_not_a_conflict(engine, ns):
    core = engine.core()
    _apply(core, ns, _cm("ssa", a="1"), "alice")
    cm = _apply(core, ns, _cm("ssa", a="1", c="3"), "bob")
    owned = _owned(cm)
    assert "f:a" in owned[("alice", "Apply")]["f:data"] and "f:a" in owned[("bob", "Apply")]["f:data"]


def test_force_takes_ownership(engine, ns):
    core = engine.core()
    _apply(core, ns, _cm("ssa", a="1", b="1"), "alice")
    cm = _apply(core, ns, _cm("ssa", a="2"), "bob", force=True)
    assert cm.data == {"a": "2", "b": "1"}
    owned = _owned(cm)
    assert owned[("bob", "Apply")] == {"f:data": {"f:a": {}}}
    assert owned[("alice", "Apply")] == {"f:data": {"f:b": {}}}


def test_conflict_with_an_update_manager_names_its_api_version(engine, ns):
    core = engine.core()
    core.create_namespaced_config_map(ns, _cm("ssa", a="1"), field_manager="creator")
    with pytest.raises(client.ApiException) as err:
        _apply(core, ns, _cm("ssa", a="2"), "bob")
    status = status_of(err.value)
    assert err.value.status == 409
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "creator" using v1', "field": ".data.a"}
    ]


def test_dropping_a_field_from_the_applied_config_removes_it(engine, ns):
    core = engine.core()
    _apply(core, ns, _cm("ssa", a="1", b="2"), "alice")
    cm = _apply(core, ns, _cm("ssa", a="1"), "alice")
    assert cm.data == {"a": "1"}
