"""The OpenAPI v2 document in gnostic's protobuf encoding (openapi_v2.Document).

kubectl 1.27 and 1.28 fetch /openapi/v2 only as protobuf (for field-validation support and
apply's patch metadata); newer ones use /openapi/v3 JSON. This writes the protobuf wire format
directly from the JSON document: the few message types involved need no protobuf library.
"""

from __future__ import annotations

import struct
from typing import Any

import yaml

MEDIA_TYPES = (
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _msg(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _str(num: int, value: Any) -> bytes:
    return _msg(num, str(value).encode()) if value not in (None, "") else b""


def _bool(num: int, value: Any) -> bytes:
    return _varint(num << 3) + b"\x01" if value else b""


def _int(num: int, value: Any) -> bytes:
    return _varint(num << 3) + _varint(int(value)) if value else b""


def _double(num: int, value: Any) -> bytes:
    return _varint(num << 3 | 1) + struct.pack("<d", float(value)) if value is not None else b""


def _any(num: int, value: Any) -> bytes:
    """A gnostic Any: the value as YAML text (field 2)."""
    return _msg(num, _str(2, yaml.safe_dump(value, default_flow_style=False)))


def _extensions(num: int, obj: dict) -> bytes:
    return b"".join(_msg(num, _str(1, k) + _any(2, v)) for k, v in obj.items() if k.startswith("x-"))


def _schema(s: dict) -> bytes:
    out = (
        _str(1, s.get("$ref"))
        + _str(2, s.get("format"))
        + _str(3, s.get("title"))
        + _str(4, s.get("description"))
    )
    if "default" in s:
        out += _any(5, s["default"])
    out += _double(7, s.get("maximum")) + _double(9, s.get("minimum"))
    out += _int(11, s.get("maxLength")) + _int(12, s.get("minLength")) + _str(13, s.get("pattern"))
    out += _int(14, s.get("maxItems")) + _int(15, s.get("minItems")) + _bool(16, s.get("uniqueItems"))
    out += b"".join(_str(19, r) for r in s.get("required") or [])
    out += b"".join(_any(20, e) for e in s.get("enum") or [])
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out += _msg(21, _msg(1, _schema(extra)))
    elif isinstance(extra, bool):
        out += _msg(21, _varint(2 << 3) + (b"\x01" if extra else b"\x00"))
    if s.get("type"):
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        out += _msg(22, b"".join(_str(1, t) for t in types))
    if isinstance(s.get("items"), dict):
        out += _msg(23, _msg(1, _schema(s["items"])))
    out += b"".join(_msg(24, _schema(a)) for a in s.get("allOf") or [])
    if s.get("properties"):
        out += _msg(
            25, b"".join(_msg(1, _str(1, k) + _msg(2, _schema(v))) for k, v in s["properties"].items())
        )
    out += _bool(27, s.get("readOnly"))
    return out + _extensions(31, s)


def _parameter(p: dict) -> bytes:
    if p.get("in") == "body":
        body = (
            _str(1, p.get("description")) + _str(2, p["name"]) + _str(3, "body") + _bool(4, p.get("required"))
        )
        return _msg(1, _msg(1, body + _msg(5, _schema(p.get("schema") or {}))))
    common = (
        _bool(1, p.get("required")) + _str(2, p["in"]) + _str(3, p.get("description")) + _str(4, p["name"])
    )
    if p["in"] == "query":
        sub = _msg(3, common + _str(6, p.get("type")) + _bool(20, p.get("uniqueItems")))
    else:
        sub = _msg(4, common + _str(5, p.get("type")) + _bool(19, p.get("uniqueItems")))
    return _msg(1, _msg(2, sub))


def _operation(op: dict) -> bytes:
    out = b"".join(_str(1, t) for t in op.get("tags") or []) + _str(3, op.get("description"))
    out += _str(5, op.get("operationId"))
    out += b"".join(_str(6, t) for t in op.get("produces") or []) + b"".join(
        _str(7, t) for t in op.get("consumes") or []
    )
    out += b"".join(_msg(8, _parameter(p)) for p in op.get("parameters") or [])
    codes = b""
    for code, response in (op.get("responses") or {}).items():
        body = _str(1, response.get("description"))
        if "schema" in response:
            body += _msg(2, _msg(1, _schema(response["schema"])))
        codes += _msg(1, _str(1, code) + _msg(2, _msg(1, body)))
    out += _msg(9, codes)
    return out + _extensions(13, op)


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def encode_document(doc: dict) -> bytes:
    """openapi_v2.Document bytes for a Swagger 2.0 JSON document."""
    out = _str(1, doc.get("swagger", "2.0"))
    info = doc.get("info") or {}
    out += _msg(2, _str(1, info.get("title")) + _str(2, info.get("version")))
    paths = b""
    for path, item in doc.get("paths", {}).items():
        body = b"".join(_msg(num, _operation(item[m])) for m, num in _METHODS.items() if m in item)
        body += b"".join(_msg(9, _parameter(p)) for p in item.get("parameters") or [])
        paths += _msg(2, _str(1, path) + _msg(2, body))
    out += _msg(8, paths)
    defs = b"".join(_msg(1, _str(1, k) + _msg(2, _schema(v))) for k, v in doc.get("definitions", {}).items())
    return out + _msg(9, defs)
