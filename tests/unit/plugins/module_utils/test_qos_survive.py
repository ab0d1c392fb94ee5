"""spec.survive (issue 37): the failures an application states it must outlive, read with every
error at once, kept through the KB's round trip, and described by the JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    Application,
    QosSpecError,
    load_application,
)

ROOT = Path(__file__).resolve().parents[4]
SCHEMA = json.loads((ROOT / "docs" / "qos-spec.schema.json").read_text())
DEPLOY = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx"}]}}},
}


def spec(**extra) -> dict:
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "demo"},
        "spec": {"objective": {"energy": 1}, "services": [{"name": "web", "manifests": [DEPLOY]}], **extra},
    }


def test_survive_is_read_and_kept_through_the_round_trip():
    app = load_application(spec(survive=[{"cluster": "any"}, {"label": "topology.kubernetes.io/zone"}]))
    assert app.survive == [{"cluster": "any"}, {"label": "topology.kubernetes.io/zone"}]
    again = Application.from_dict(json.loads(json.dumps(app.to_dict())))
    assert again.survive == app.survive
    assert load_application(spec(survive=[])).survive == []


def test_no_statement_is_none_and_leaves_the_stored_form_unchanged():
    app = load_application(spec())
    assert app.survive is None
    assert "survive" not in app.to_dict()  # a stored spec keeps its version on a re-put


def test_every_bad_entry_is_named_at_once():
    bad = spec(
        survive=[
            {"cluster": "edge-1"},
            {"label": "Bad Key"},
            {"site": "a"},
            "any",
            {"cluster": "any", "label": "x"},
        ]
    )
    with pytest.raises(QosSpecError) as info:
        load_application(bad)
    text = "\n".join(info.value.errors)
    for path in (
        "spec.survive[0].cluster",
        "spec.survive[1].label",
        "spec.survive[2]",
        "spec.survive[3]",
        "spec.survive[4]",
    ):
        assert path in text
    with pytest.raises(QosSpecError) as info:
        load_application(spec(survive={"cluster": "any"}))
    assert any(e.startswith("spec.survive:") for e in info.value.errors)


def test_the_schema_agrees_with_the_reader():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert not list(validator.iter_errors(spec(survive=[{"cluster": "any"}, {"label": "site"}])))
    for wrong in (
        [{"cluster": "edge-1"}],
        [{"site": "a"}],
        {"cluster": "any"},
        [{"cluster": "any", "label": "x"}],
    ):
        assert list(validator.iter_errors(spec(survive=wrong))), wrong
