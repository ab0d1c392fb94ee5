"""Kubernetes quantities and their exact values, shared by the parser's tests and the test that
every former copy of the parser is the one parser (tests/unit/testbed/test_quantity_copies.py)."""

from __future__ import annotations

from decimal import Decimal

# (text, exact value) as k8s.io/apimachinery resource.Quantity reads them
CASES = [
    ("250m", Decimal("0.25")),
    ("1", Decimal(1)),
    ("1.5", Decimal("1.5")),
    (".5", Decimal("0.5")),
    ("128Mi", Decimal(128 * 2**20)),
    ("1Gi", Decimal(2**30)),
    ("1Ei", Decimal(2**60)),
    ("7160M", Decimal(7_160_000_000)),
    ("2k", Decimal(2000)),
    ("1e3", Decimal(1000)),
    ("1E-3", Decimal("0.001")),
    ("100n", Decimal("1E-7")),
    ("5u", Decimal("0.000005")),
    ("+1", Decimal(1)),
    (" 2 ", Decimal(2)),
    (3, Decimal(3)),
    (0.5, Decimal("0.5")),
]
