"""One parser for Kubernetes quantities, and every former copy agrees with it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from ansible_collections.qonnect.core.plugins.module_utils import qos
from ansible_collections.qonnect.core.plugins.module_utils.quantity import (
    parse_quantity,
    parse_quantity_decimal,
)
from qonnect.agent import collector
from qonnect_testbed import fleet
from qonnect_testbed.sim import objects

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


@pytest.mark.parametrize(("text", "value"), CASES)
def test_quantities_parse_exactly(text, value):
    assert parse_quantity_decimal(text) == value
    assert parse_quantity(text) == float(value)


@pytest.mark.parametrize("bad", ["", "ten", "1K", "1.2.3", "1Gb", "m", "1e", None, True, float("nan"), [1]])
def test_non_quantities_raise_value_error_naming_the_value(bad):
    with pytest.raises(ValueError) as err:
        parse_quantity_decimal(bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize(("text", "value"), [c for c in CASES if not str(c[0]).startswith("+")])
def test_every_former_copy_is_the_one_parser(text, value):
    assert qos.parse_quantity is parse_quantity
    assert objects.parse_quantity(text) == float(value)
    assert fleet.quantity(text, "nodes.cpu") == float(value)
    assert collector._quantity(text) == value


def test_each_caller_keeps_its_own_policy_for_bad_input():
    assert objects.parse_quantity("ten") == 0.0  # the emulator: the API validated it already
    with pytest.raises(fleet.ProfileError, match=r"nodes\.cpu: expected a number or quantity"):
        fleet.quantity("ten", "nodes.cpu")
    with pytest.raises(fleet.ProfileError):
        fleet.quantity("-1", "nodes.cpu")
    assert collector._quantity("ten") == 0  # the agent logs and counts nothing
