"""Issue 34.8: placement messages read like the spec (``256Mi``, ``500m``, ``matchLabels``), not
the engine's internal forms (``memory 2.68435e+08``, ``match_labels``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import PlacementError, place
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application
from ansible_collections.qonnect.core.plugins.module_utils.quantity import (
    format_bytes,
    format_cpu,
    parse_quantity,
)

ROOT = Path(__file__).resolve().parents[4]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())


def app(constraints: dict, requests: dict | None = None):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests or {"cpu": "100m"}}}]},
    }
    return load_application(
        {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": "a"},
            "spec": {
                "services": [{"name": "s", "tier": "fog", "constraints": constraints, "manifests": [pod]}]
            },
        }
    )


@pytest.mark.parametrize(
    "text", ["256Mi", "1536Mi", "1Gi", "500", "0", "64Ki", "7Ti", "500m", "2", "250m", "1500m"]
)
def test_formats_read_back_as_the_same_quantity(text):
    value = parse_quantity(text)
    shown = format_cpu(value) if text.endswith("m") or text == "2" else format_bytes(value)
    assert parse_quantity(shown) == value


def test_readable_forms():
    assert format_bytes(268435456) == "256Mi"
    assert format_bytes(1536 * 2**20) == "1.5Gi"
    assert format_bytes(7160000000) == "6.67Gi"
    assert (format_cpu(0.5), format_cpu(2), format_cpu(1.5)) == ("500m", "2", "1500m")


def test_min_free_and_capacity_messages_use_quantities():
    with pytest.raises(PlacementError) as err:
        place(app({"minFree": {"memory": "1000Gi", "cpu": "500m"}}), PAPER)
    assert err.value.constraint == "minFree cpu 500m, memory 1000Gi", err.value.constraint
    assert "e+" not in str(err.value)
    with pytest.raises(PlacementError) as err:
        place(app({}, {"cpu": "100m", "memory": "256Ti"}), PAPER)
    assert "memory 256Ti" in err.value.constraint and "e+" not in err.value.constraint
    rows = place(app({"minFree": {"cpu": "8"}}), PAPER).explanation["s"]
    reasons = [r["reason"] for r in rows if not r["eligible"] and "minFree" in (r["reason"] or "")]
    assert reasons and all("e+" not in r and "Gi" in r for r in reasons), reasons


def test_selector_messages_use_the_spec_keys():
    selector = {"matchLabels": {"qonnect.io/profile": "nowhere"}}
    with pytest.raises(PlacementError) as err:
        place(app({"clusterSelector": selector}), PAPER)
    assert "matchLabels" in err.value.constraint and "match_labels" not in err.value.constraint
