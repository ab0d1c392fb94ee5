"""The whole suite's scheduling over pytest-xdist workers (tests/support/scheduling.py)."""

from __future__ import annotations

import pytest
from support.scheduling import Scheduling


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--write-group-durations",
        metavar="FILE",
        default=None,
        help="write the run's seconds per scheduling group to FILE (tests/durations.json orders the next run)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Scheduling(config), "qonnect-scheduling")
