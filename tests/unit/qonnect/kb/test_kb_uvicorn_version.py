"""The KB overrides uvicorn internals (kb/protocol.py, kb/hotpath.py): only the tested range
starts, and the pin in services/pyproject.toml says the same range."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
from qonnect.errors import UserError
from qonnect.kb.protocol import TESTED_UVICORN, check_uvicorn_version

PYPROJECT = Path(__file__).resolve().parents[4] / "services" / "pyproject.toml"


def test_the_installed_uvicorn_is_the_tested_one():
    check_uvicorn_version()
    check_uvicorn_version(version("uvicorn"))


@pytest.mark.parametrize("other", ["0.27.0", "0.54.9", "0.56.0", "1.0.0"])
def test_another_uvicorn_is_refused_with_the_range_to_install(other):
    with pytest.raises(UserError, match=r"uvicorn\[standard\]>=0\.55\.0,<0\.56\.0") as err:
        check_uvicorn_version(other)
    assert other in str(err.value)


def test_the_pin_is_the_tested_range():
    pin = re.search(r'"uvicorn\[standard\]>=([\d.]+),<([\d.]+)"', PYPROJECT.read_text())
    assert pin, "services/pyproject.toml pins uvicorn"
    low, high = (tuple(int(p) for p in v.split(".")) for v in pin.groups())
    assert (low + (0,) * 3)[:3] == TESTED_UVICORN[0] and (high + (0,) * 3)[:3] == TESTED_UVICORN[1]
