"""The testbed's cluster simulation in process, for unit tests of its controllers: one cluster of
a profile on a real Store, driven by an async scenario on the simulation's own event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_scenario(
    scenario: Callable[[Any, Any], Awaitable[None]],
    profile: str = "paper",
    nodes: int | None = None,
    **options,
) -> None:
    """``await scenario(store, sim)`` against the first cluster of ``profile`` (``nodes`` workers),
    its simulation started with ``options`` and stopped afterwards."""
    from qonnect_testbed import fleet
    from qonnect_testbed.sim import ClusterSim
    from qonnect_testbed.store import Store

    async def main() -> None:
        sizes = {"nodes": nodes} if nodes is not None else {}
        spec = fleet.expand(fleet.load(profile), clusters=1, **sizes).clusters[0]
        store = Store(spec.name)
        sim = ClusterSim(store, spec, start_delay=0.05, heartbeat_seconds=60, **options)
        await sim.start()
        try:
            await scenario(store, sim)
        finally:
            await sim.stop()

    asyncio.run(main())


async def until(check: Callable[[], T], timeout: float = 10.0) -> T:
    """Poll ``check`` while the simulation runs (yielding to it) until it returns something
    truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"condition not met within {timeout:g}s"
        await asyncio.sleep(0.02)
    return value
