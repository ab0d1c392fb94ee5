"""Request models: unknown fields, bad types and unstorable values are errors naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from qonnect.kb.errors import validation_body
from qonnect.kb.models import ClusterIn, ClusterPatch, PlacementIn, Report, TokenIn


def fields(exc: ValidationError) -> set[str]:
    return {e["field"] for e in validation_body(exc.errors())["errors"]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"seq": 1, "ts": 1, "extra": 1}, "extra"),
        ({"seq": 2**63, "ts": 1}, "seq"),
        ({"seq": 1, "ts": float("nan")}, "ts"),
        ({"seq": 1, "ts": 1, "nodes": [{"name": "a", "ready": True, "cpu": 1}]}, "nodes.0.cpu"),
        (
            {"seq": 1, "ts": 1, "nodes": [{"name": "a", "ready": True, "allocatable": {"memory": -1}}]},
            "nodes.0.allocatable.memory",
        ),
        (
            {
                "seq": 1,
                "ts": 1,
                "workloads": [{"namespace": "n", "kind": "K", "name": "w", "status": "Sleeping"}],
            },
            "workloads.0.status",
        ),
        ({"seq": 1, "ts": 1, "error": "a\x00b"}, "error"),
        ({"seq": 1, "ts": 1, "error": "\ud800"}, "error"),
        ({"seq": 1, "ts": 1, "latencies": {"kb": -1}}, "latencies.kb"),
    ],
)
def test_bad_reports_name_the_field(body, field):
    with pytest.raises(ValidationError) as err:
        Report.model_validate(body)
    assert field in fields(err.value)


def test_duplicate_nodes_in_one_report_are_refused():
    body = {"seq": 1, "ts": 1, "nodes": [{"name": "a", "ready": True}, {"name": "a", "ready": False}]}
    with pytest.raises(ValidationError) as err:
        Report.model_validate(body)
    assert "node names must be unique" in validation_body(err.value.errors())["detail"]


def test_cluster_names_are_dns_labels_and_patch_cannot_null_the_tier():
    with pytest.raises(ValidationError) as err:
        ClusterIn.model_validate({"name": "Bad_Name", "tier": "cloud"})
    assert fields(err.value) == {"name"}
    with pytest.raises(ValidationError) as err:
        ClusterPatch.model_validate({"tier": None})
    assert fields(err.value) == {"tier"}
    patch = ClusterPatch.model_validate({"kubeconfig": None})
    assert patch.model_fields_set == {"kubeconfig"}


@pytest.mark.parametrize("field", ["tier", "location", "labels"])
def test_patch_fields_that_cannot_be_null_refuse_null_and_document_no_null(field):
    with pytest.raises(ValidationError) as err:
        ClusterPatch.model_validate({field: None})
    assert fields(err.value) == {field}
    assert "null" not in str(ClusterPatch.model_json_schema()["properties"][field])
    assert ClusterPatch.model_validate({}).model_fields_set == set()


def test_bounded_text_keeps_its_limits_and_refuses_nul_inside_labels():
    with pytest.raises(ValidationError) as err:
        ClusterIn.model_validate({"name": "c", "tier": "edge", "location": "x" * 254})
    assert fields(err.value) == {"location"}
    with pytest.raises(ValidationError) as err:
        ClusterIn.model_validate({"name": "c", "tier": "edge", "labels": {"k": "v\x00"}})
    assert fields(err.value) == {"labels.k"}
    assert ClusterIn.model_json_schema()["properties"]["labels"]["propertyNames"] == {
        "maxLength": 317,
        "minLength": 1,
    }


def test_tokens_bind_agents_and_only_agents_to_a_cluster():
    assert TokenIn.model_validate({"role": "agent", "cluster": "edge-1"}).cluster == "edge-1"
    for body in ({"role": "agent"}, {"role": "reader", "cluster": "edge-1"}):
        with pytest.raises(ValidationError) as err:
            TokenIn.model_validate(body)
        assert "cluster" in validation_body(err.value.errors())["detail"]


def test_placements_take_services_to_cluster_lists_and_a_fencing_token():
    body = PlacementIn.model_validate(
        {"desired": {"web": [{"cluster": "c1", "replicas": 2}]}, "fencing": {"term": 3, "seq": 4}}
    )
    assert body.desired["web"][0].replicas == 2 and body.fencing.term == 3
    with pytest.raises(ValidationError) as err:
        PlacementIn.model_validate({"fencing": {"term": -1, "seq": 0}})
    assert fields(err.value) == {"fencing.term"}


def test_malformed_json_is_reported_as_such():
    with pytest.raises(ValidationError) as err:
        Report.model_validate_json(b'{"seq": 1,')
    assert validation_body(err.value.errors())["detail"].startswith("body: malformed JSON")
