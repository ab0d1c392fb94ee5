"""Every former copy of the quantity parser is the collection's one parser (testbed and agent
side; the parser's own cases are in tests/unit/plugins/module_utils/test_quantity.py, which the
collection ships: this file needs the testbed, which it does not)."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils import qos
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity
from qonnect.agent import collector
from qonnect_testbed import fleet
from qonnect_testbed.sim import objects
from support.quantities import CASES


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
