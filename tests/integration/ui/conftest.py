"""Fixtures of the status page and `qonnect status` tests: one real KB per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _ui_fleet import Federation, start_federation
from support import stop_process


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """A KB with the paper fleet registered, healthy and running Bookinfo (one per test module)."""
    root = tmp_path_factory.mktemp("ui-kb")
    proc, fed = start_federation(root)
    try:
        yield fed
    finally:
        stop_process(proc)
