"""Secret manifests in stored specs, as non-admin readers see them (issue 34.7).

A spec carries its manifests, Kubernetes ``Secret`` objects included. Admin and controller
tokens read them whole (the controller deploys them); every other role reads each Secret's
name and keys, and in place of each value ``hmac-sha256:<hex>``, keyed with this KB's own
random key (``digest_key``, stored once in its database): enough to see that a value changed
between versions, not the value, and no reader can test guesses of a short password offline
(an unkeyed hash of one could be). The database keeps the spec as it was given;
the answers are what is redacted, in every route that returns a spec (``for_reader``).

Manifests appear as mappings (the normalized ``application`` and native specs) or, in
QONNECT's format, as YAML text of a tier bundle: such a text that holds a Secret is answered
as the same documents dumped again with the Secret redacted.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from qonnect.kb.auth import Principal
from qonnect.kb.storage import Database

SECRET_FIELDS = ("data", "stringData")
DIGEST_PREFIX = "hmac-sha256:"
KEY_NAME = "secret-digest"
MAX_DEPTH = 64  # the KB refuses deeper specs (models.storable); a bound all the same


def digest_key(db: Database) -> bytes:
    """This KB's key of the digests, made on first use; every instance on the database shares it
    (the first insert wins), so digests stay comparable across instances and restarts."""
    conn = db.connect(writer=True)
    try:
        conn.begin()
        conn.execute(
            "INSERT INTO kb_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (KEY_NAME, secrets.token_hex(32)),
        )
        row = conn.one("SELECT value FROM kb_keys WHERE name = ?", (KEY_NAME,))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()
    assert row is not None
    return bytes.fromhex(row[0])


def digest(value: Any, key: bytes) -> str:
    """``hmac-sha256:<hex>`` of a Secret value as the manifest gives it (base64 text for ``data``)."""
    text = value if isinstance(value, str) else repr(value)
    return DIGEST_PREFIX + hmac.new(key, text.encode("utf-8", "replace"), hashlib.sha256).hexdigest()


def is_secret(obj: Any) -> bool:
    """A Kubernetes Secret manifest (nothing else in a spec has ``kind: Secret``)."""
    return isinstance(obj, dict) and obj.get("kind") == "Secret"


def redact_secret(obj: dict, key: bytes) -> dict:
    """A Secret with each value of ``data``/``stringData`` replaced by its digest."""
    out = dict(obj)
    for field in SECRET_FIELDS:
        values = obj.get(field)
        if isinstance(values, dict):
            out[field] = {name: digest(v, key) for name, v in values.items()}
        elif values is not None:
            out[field] = digest(values, key)
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict) and "kubectl.kubernetes.io/last-applied-configuration" in annotations:
        meta = dict(obj["metadata"])
        meta["annotations"] = {
            k: digest(v, key) if k == "kubectl.kubernetes.io/last-applied-configuration" else v
            for k, v in annotations.items()
        }
        out["metadata"] = meta
    return out


def _yaml_text(text: str, key: bytes) -> str:
    """A YAML text (a QONNECT tier bundle) with its Secrets redacted; unchanged without any."""
    if "Secret" not in text:
        return text
    import yaml

    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return text
    if not any(is_secret(d) for d in docs):
        return text
    return yaml.safe_dump_all([redact(d, key) for d in docs], sort_keys=False)


def redact(obj: Any, key: bytes, depth: int = 0) -> Any:
    """A copy of ``obj`` with every Secret manifest in it redacted (the input is not changed)."""
    if depth > MAX_DEPTH:
        return obj
    if isinstance(obj, dict):
        if is_secret(obj):
            return redact_secret(obj, key)
        return {k: redact(v, key, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, key, depth + 1) for v in obj]
    if isinstance(obj, str) and "Secret" in obj:
        return _yaml_text(obj, key)
    return obj


def for_reader(record: dict, who: Principal, key: bytes) -> dict:
    """An application or version record (``spec``, ``application``) as ``who`` may read it
    (``key``: the KB's ``digest_key``)."""
    if who.sees_secrets:
        return record
    return {k: redact(v, key) if k in ("spec", "application") else v for k, v in record.items()}
