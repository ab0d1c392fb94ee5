"""kb/redact.py: Secret manifests as non-admin readers see them (issue 34.7)."""

from __future__ import annotations

import hashlib
import hmac

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


KEY = b"k" * 32


def sha(text: str) -> str:
    return "hmac-sha256:" + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


def test_values_become_digests_and_the_input_is_untouched():
    doc = {"kind": "List", "items": [SECRET, {"kind": "ConfigMap", "data": {"a": "b"}}]}
    out = redact(doc, KEY)
    secret = out["items"][0]
    assert secret["data"] == {"pw": sha("c2VjcmV0")} and secret["metadata"]["name"] == "db"
    assert "c2VjcmV0" not in str(out)
    assert out["items"][1] == {"kind": "ConfigMap", "data": {"a": "b"}}  # not a Secret: as stored
    assert doc["items"][0]["data"] == {"pw": "c2VjcmV0"}


def test_yaml_text_bundles_are_redacted_and_other_text_is_kept():
    text = yaml.safe_dump_all([{"kind": "Deployment", "metadata": {"name": "w"}}, SECRET])
    out = redact({"fog_svc": text, "note": "a Secret is mentioned here", "bad": "kind: Secret: ["}, KEY)
    assert "c2VjcmV0" not in out["fog_svc"]
    assert [d["kind"] for d in yaml.safe_load_all(out["fog_svc"])] == ["Deployment", "Secret"]
    assert out["note"] == "a Secret is mentioned here" and out["bad"] == "kind: Secret: ["


def test_only_admin_and_controller_read_secrets_whole():
    record = {"name": "a", "version": 1, "spec": {"m": [SECRET]}, "application": {"s": [SECRET]}}
    for role in ("admin", "controller"):
        assert for_reader(record, Principal("t", role), KEY) is record
    for role, cluster in (("reader", None), ("agent", "edge-1")):
        seen = for_reader(record, Principal("t", role, cluster), KEY)
        assert "c2VjcmV0" not in str(seen) and seen["version"] == 1


def test_the_digest_is_keyed_so_a_guess_cannot_be_checked_and_another_kb_differs():
    seen = redact(SECRET, KEY)["data"]["pw"]
    assert hashlib.sha256(b"c2VjcmV0").hexdigest() not in seen  # no unkeyed hash to test guesses on
    assert redact(SECRET, b"x" * 32)["data"]["pw"] != seen  # another KB's key, another digest
    assert redact(SECRET, KEY)["data"]["pw"] == seen  # stable under one key: a change shows


def test_a_kb_makes_its_key_once_and_keeps_it(tmp_path):
    from qonnect.kb import migrations
    from qonnect.kb.redact import digest_key
    from qonnect.kb.storage import Database

    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    key = digest_key(db)
    assert len(key) == 32 and digest_key(db) == key
    db.close()
    again = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")  # a restart reads the same key
    assert digest_key(again) == key
    again.close()
