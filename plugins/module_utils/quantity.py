# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes quantities ('250m', '128Mi', '1e3', 2): the one parser the whole project uses.

The grammar is the API server's (k8s.io/apimachinery resource.Quantity): a signed decimal
number, then a binary-SI suffix (Ki..Ei), a decimal-SI suffix (n, u, m, k, M..E) or a decimal
exponent (e3, E-2). Parsing is exact (Decimal); callers that want a float convert. Each caller
keeps its own policy for bad input (raise a spec error, log and count 0...), so this module
only ever raises ValueError.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity_decimal(value: Any) -> Decimal:
    """A quantity as an exact Decimal; ValueError naming the value when it is not one."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return Decimal(str(value))
    if isinstance(value, Decimal):
        return value
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 250m, 128Mi, 2)")
    try:
        number = Decimal(match.group(1))
        if match.group(2):
            return number.scaleb(int(match.group(2)[1:]))
        return number * _SUFFIX[match.group(3) or ""]
    except (InvalidOperation, ValueError, OverflowError):
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def parse_quantity(value: Any) -> float:
    """A quantity as a float ('250m' -> 0.25, '1Gi' -> 1073741824.0); ValueError when not one."""
    return float(parse_quantity_decimal(value))
