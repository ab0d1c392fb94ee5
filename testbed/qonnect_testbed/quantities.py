"""Quantities as the API server stores them: resource.Quantity's canonical form.

Real servers decode every quantity field into a resource.Quantity and write it back in
canonical form ("0.5" -> "500m", "1.5Gi" -> "1536Mi", "1000" -> "1k"); a value that is not a
quantity fails the decoding of the whole object with 400 BadRequest. Parsing is the project's
one parser (module_utils/quantity.py); this module adds the suffix format and the printing.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity_decimal

UPSTREAM_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_SUFFIX = re.compile(r"(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?$")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_NANO = Decimal("1e-9")


def canonical(value: Any) -> str:
    """The canonical string of a quantity; ValueError when value is not one."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    number = parse_quantity_decimal(text)  # raises ValueError
    suffix = _SUFFIX.search(text).group(1) or ""
    fmt = (
        "binary"
        if suffix.endswith("i")
        else "exponent"
        if suffix[:1] in ("e", "E") and len(suffix) > 1
        else "decimal"
    )
    number = number.quantize(_NANO, rounding=ROUND_CEILING) if number.as_tuple().exponent < -9 else number
    if number == 0:
        return "0"
    if fmt == "binary" and abs(number) >= 1024 and number == number.to_integral_value():
        mantissa, power = int(number), 0
        while mantissa % 1024 == 0 and power < len(_BINARY) - 1:
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY[power]}"
    sign, digits, exponent = number.normalize().as_tuple()
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if exponent > 18:
        mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
    text = f"{'-' if sign else ''}{mantissa}"
    if fmt == "exponent":
        return text + (f"e{exponent}" if exponent else "")
    return text + _DECIMAL[exponent]


def _fix_map(mapping: Any, bad: list[str]) -> None:
    if not isinstance(mapping, dict):
        return
    for key, value in mapping.items():
        try:
            mapping[key] = canonical(value)
        except (ValueError, TypeError, ArithmeticError):
            bad.append(str(value))


def _fix_pod_spec(spec: Any, bad: list[str]) -> None:
    if not isinstance(spec, dict):
        return
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                _fix_map(resources.get("requests"), bad)
                _fix_map(resources.get("limits"), bad)
    _fix_map(spec.get("overhead"), bad)
    for volume in spec.get("volumes") or []:
        empty = volume.get("emptyDir") if isinstance(volume, dict) else None
        if isinstance(empty, dict) and "sizeLimit" in empty:
            box = {"sizeLimit": empty["sizeLimit"]}
            _fix_map(box, bad)
            empty["sizeLimit"] = box["sizeLimit"]


def canonicalise(kind: str, api_version: str, obj: dict) -> list[str]:
    """Rewrite obj's quantity fields in canonical form; returns the values that are not quantities."""
    bad: list[str] = []
    spec = obj.get("spec")
    if kind == "Pod":
        _fix_pod_spec(spec, bad)
    elif isinstance(spec, dict) and isinstance(spec.get("template"), dict):
        _fix_pod_spec(spec["template"].get("spec"), bad)
    elif kind == "Node":
        status = obj.get("status") or {}
        _fix_map(status.get("capacity"), bad)
        _fix_map(status.get("allocatable"), bad)
    return bad
