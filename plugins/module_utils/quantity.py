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


_BINARY_UNITS = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_bytes(value: float) -> str:
    """Bytes as a person reads them in a spec ('256Mi', '1.5Gi', '500'): the largest binary
    suffix, exact when the value is a whole number of it, else three significant digits."""
    number = float(value)
    if not math.isfinite(number):
        return str(number)
    power = 0
    while power < len(_BINARY_UNITS) - 1 and abs(number) >= 1024 ** (power + 1):
        power += 1
    scaled = number / 1024**power
    if scaled == int(scaled):
        return f"{int(scaled)}{_BINARY_UNITS[power]}"
    return f"{scaled:.3g}{_BINARY_UNITS[power]}" if power else f"{number:.0f}"


def format_cpu(cores: float) -> str:
    """CPU as a spec writes it: whole cores as '2', fractions in millicores ('500m')."""
    number = float(cores)
    if not math.isfinite(number):
        return str(number)
    if number == int(number):
        return str(int(number))
    return f"{number * 1000:.3g}m" if abs(number) < 1 else f"{round(number * 1000)}m"


def format_quantity(resource: str, value: float) -> str:
    """A resource amount in spec form: cpu in cores/millicores, anything else in bytes."""
    return format_cpu(value) if resource == "cpu" else format_bytes(value)
