"""The whole suite's scheduling over pytest-xdist workers (tests/support/scheduling.py), and the
fixtures more than one suite uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import project_helm
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


@pytest.fixture
def helm_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project's helm first on PATH (support.project_helm: built once into its cache)."""
    try:
        bin_dir = project_helm()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir
