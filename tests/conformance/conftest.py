"""Fixtures of the conformance suite: one federation per engine per session, a namespace per test.

Every test takes `engine` and so runs once per engine in QONNECT_CONFORMANCE_ENGINES
(default "emulator,kube"); pytest groups the tests by engine, so only one federation runs at
a time. Where the emulator knowingly differs, the test asserts each engine's own behaviour
explicitly (`if engine.is_emulator: ...`), and docs/testbed.md lists the difference.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pytest
from conformance_engines import Engine, requested_engines, running, unique
from kubernetes import client
from support import wait_for


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: Kubernetes behaviour checked on every engine")


@pytest.hookimpl(tryfirst=True)  # before tests/support/scheduling.py reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real engine's half carries the project's `kube` marker (`-m "not kube"` leaves it out).

    Every test is in the xdist group `conformance`, split per engine by the scheduler, so one
    worker starts each engine's session federation and runs all of that engine's tests."""
    here = Path(__file__).parent
    for item in items:
        if not Path(str(item.fspath)).is_relative_to(here):
            continue  # a conftest's modifyitems sees the whole session's items
        item.add_marker(pytest.mark.xdist_group("conformance"))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("engine") == "kube":
            item.add_marker(pytest.mark.kube)


@pytest.fixture(scope="session", params=requested_engines())
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A running federation of the requested engine (started once per session)."""
    directory = tmp_path_factory.mktemp(f"conformance-{request.param}")
    with running(request.param, directory) as eng:
        yield eng


@pytest.fixture
def ns(engine: Engine) -> Iterator[str]:
    """A fresh namespace per test; deleted (without waiting) afterwards."""
    name = unique("conf")
    core = engine.core()
    core.create_namespace({"metadata": {"name": name}})
    # As on any real cluster, pods can be created only once the default ServiceAccount exists.
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        what=f"ServiceAccount default in {name}",
    )
    yield name
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)
