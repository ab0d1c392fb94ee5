from __future__ import annotations

import pytest
from qonnect_testbed.cli import parse_labels
from qonnect_testbed.errors import TestbedError
from qonnect_testbed.latency import LatencyMap


def test_latency_by_bound_source_address():
    latency = LatencyMap(
        {"127.0.0.2": "cloud-1", "127.0.0.3": "edge-1"},
        {"cloud-1": {"edge-1": 25.0, "cloud-1": 0.1}, "edge-1": {"cloud-1": 25.0}},
    )
    assert latency.delay_ms("127.0.0.3", "cloud-1") == 25.0
    assert latency.delay_ms("127.0.0.2", "cloud-1") == 0.1
    assert latency.delay_ms("127.0.0.1", "cloud-1") == 0.0
    assert latency.delay_ms(None, "cloud-1") == 0.0


def test_label_arguments():
    assert parse_labels(["a=b", "qonnect.io/x=1.5", "gone-"]) == {
        "a": "b",
        "qonnect.io/x": "1.5",
        "gone": None,
    }
    for bad in ("novalue", "a=b c", "Bad Key=1", "a=" + "x" * 64):
        with pytest.raises(TestbedError, match="--label"):
            parse_labels([bad])
