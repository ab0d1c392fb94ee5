"""kb/redact.py: Secret manifests as non-admin readers see them (issue 34.7)."""

from __future__ import annotations

import hashlib

import yaml
from qonnect.kb.auth import Principal
from qonnect.kb.redact import for_reader, redact

SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "db",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"data": {"pw": "c2VjcmV0"}}'},
    },
    "data": {"pw": "c2VjcmV0"},
}


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_values_become_digests_and_the_input_is_untouched():
    doc = {"kind": "List", "items": [SECRET, {"kind": "ConfigMap", "data": {"a": "b"}}]}
    out = redact(doc)
    secret = out["items"][0]
    assert secret["data"] == {"pw": sha("c2VjcmV0")} and secret["metadata"]["name"] == "db"
    assert "c2VjcmV0" not in str(out)
    assert out["items"][1] == {"kind": "ConfigMap", "data": {"a": "b"}}  # not a Secret: as stored
    assert doc["items"][0]["data"] == {"pw": "c2VjcmV0"}


def test_yaml_text_bundles_are_redacted_and_other_text_is_kept():
    text = yaml.safe_dump_all([{"kind": "Deployment", "metadata": {"name": "w"}}, SECRET])
    out = redact({"fog_svc": text, "note": "a Secret is mentioned here", "bad": "kind: Secret: ["})
    assert "c2VjcmV0" not in out["fog_svc"]
    assert [d["kind"] for d in yaml.safe_load_all(out["fog_svc"])] == ["Deployment", "Secret"]
    assert out["note"] == "a Secret is mentioned here" and out["bad"] == "kind: Secret: ["


def test_only_admin_and_controller_read_secrets_whole():
    record = {"name": "a", "version": 1, "spec": {"m": [SECRET]}, "application": {"s": [SECRET]}}
    for role in ("admin", "controller"):
        assert for_reader(record, Principal("t", role)) is record
    for role, cluster in (("reader", None), ("agent", "edge-1")):
        seen = for_reader(record, Principal("t", role, cluster))
        assert "c2VjcmV0" not in str(seen) and seen["version"] == 1
