"""One parser for Kubernetes quantities (its former copies: tests/unit/testbed/test_quantity_copies.py)."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.quantity import (
    parse_quantity,
    parse_quantity_decimal,
)
from support.quantities import CASES


@pytest.mark.parametrize(("text", "value"), CASES)
def test_quantities_parse_exactly(text, value):
    assert parse_quantity_decimal(text) == value
    assert parse_quantity(text) == float(value)


@pytest.mark.parametrize("bad", ["", "ten", "1K", "1.2.3", "1Gb", "m", "1e", None, True, float("nan"), [1]])
def test_non_quantities_raise_value_error_naming_the_value(bad):
    with pytest.raises(ValueError) as err:
        parse_quantity_decimal(bad)
    assert repr(bad) in str(err.value)
