"""labelSelector and fieldSelector query strings: parsing them as real API servers do (400 on
bad input) and matching stored objects against them.

Label matching itself is the one shared definition in module_utils/labels.py: a selector string
is parsed into matchExpressions (`=` is In, `!=` NotIn, `!key` DoesNotExist, `>`/`<` Gt/Lt).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.labels import labels_match

from qonnect_testbed.store.errors import ApiError
from qonnect_testbed.store.resources import RESOURCES

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_RE_CMP = re.compile(rf"^({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})$")
_RE_NOT_EXISTS = re.compile(rf"^!\s*({_KEY})$")
LABEL_KEY = re.compile(rf"^({_KEY})$")
LABEL_VALUE = re.compile(rf"^{_VALUE}$")

_OPERATORS = {"in": "In", "notin": "NotIn", "=": "In", "==": "In", "!=": "NotIn", ">": "Gt", "<": "Lt"}

Expression = dict[str, Any]  # a matchExpressions item: key, operator, values


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_label_selector(selector: str | None) -> list[Expression]:
    """Parse a labelSelector string (=, ==, !=, in, notin, exists, !key, >, <); 400 if invalid."""
    if not selector or not selector.strip():
        return []
    return [_parse_requirement(raw.strip()) for raw in _split_top_level(selector)]


def _parse_requirement(part: str) -> Expression:
    if m := _RE_SET.match(part):
        values = [v.strip() for v in m.group(3).split(",") if v.strip()]
        if not all(LABEL_VALUE.match(v) for v in values):
            raise _bad_selector(part)
        return {"key": m.group(1), "operator": _OPERATORS[m.group(2)], "values": values}
    if m := _RE_CMP.match(part):
        if m.group(2) in (">", "<") and not re.fullmatch(r"-?\d+", m.group(3)):
            raise _bad_selector(part)
        return {"key": m.group(1), "operator": _OPERATORS[m.group(2)], "values": [m.group(3)]}
    if m := _RE_NOT_EXISTS.match(part):
        return {"key": m.group(1), "operator": "DoesNotExist"}
    if m := LABEL_KEY.match(part):
        return {"key": m.group(1), "operator": "Exists"}
    raise _bad_selector(part)


def _bad_selector(part: str) -> ApiError:
    return ApiError(
        400,
        "BadRequest",
        f"unable to parse requirement: found '{part}', expected a label selector requirement",
    )


_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
}
FieldRequirement = tuple[list[str], bool, str]  # path, negated, value


def parse_field_selector(resource: str, selector: str | None) -> list[FieldRequirement]:
    """Parse a fieldSelector (=, ==, != on the fields real servers index); 400 otherwise."""
    if not selector or not selector.strip():
        return []
    allowed = _COMMON_FIELDS + FIELD_LABELS.get(resource, ())
    reqs: list[FieldRequirement] = []
    for raw in selector.split(","):
        part = raw.strip()
        m = re.match(r"^([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise ApiError(
                400, "BadRequest", f"invalid field selector: '{part}': expected field=value or field!=value"
            )
        field, op, value = m.groups()
        if field not in allowed:
            kind = RESOURCES[resource].kind if resource in RESOURCES else resource
            raise ApiError(
                400,
                "BadRequest",
                f"field label not supported: {field} (for {kind}; supported: {', '.join(allowed)})",
            )
        reqs.append((field.split("."), op == "!=", value))
    return reqs


def _field_value(obj: dict, path: list[str]) -> str:
    cur: Any = obj
    for key in path:
        cur = cur.get(key) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        return "false" if path in (["spec", "unschedulable"], ["spec", "hostNetwork"]) else ""
    return str(cur)


def fields_match(reqs: list[FieldRequirement], obj: dict) -> bool:
    """Whether obj satisfies every field requirement."""
    return all((_field_value(obj, path) == value) != negated for path, negated, value in reqs)


def matcher(resource: str, label_selector: str | None, field_selector: str | None) -> Callable[[dict], bool]:
    """A predicate for the selectors (parsed once; 400 BadRequest if malformed)."""
    expressions = parse_label_selector(label_selector)
    fields = parse_field_selector(resource, field_selector)
    if not expressions and not fields:
        return lambda obj: True
    return lambda obj: (
        labels_match(obj.get("metadata", {}).get("labels") or {}, None, expressions)
        and fields_match(fields, obj)
    )
