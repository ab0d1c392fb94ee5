"""Emulated network latency: delay each answer by the matrix latency to the caller's location.

Every cluster is served on its own loopback address, so a caller's source address says where
it is: a Resource Agent that binds its cluster's address (an ordinary source-address option)
is "at" that cluster's location, and its requests to another cluster take the matrix
round-trip time. Callers from other addresses (127.0.0.1, tests, kubectl) see no delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LatencyMap:
    """Source address -> location, and the round-trip matrix between locations (ms)."""

    def __init__(self, locations: Mapping[str, str], matrix: Mapping[str, Mapping[str, float]]) -> None:
        self.locations = dict(locations)
        self.matrix = {a: dict(row) for a, row in matrix.items()}

    def delay_ms(self, source: str | None, location: str) -> float:
        """Round-trip time from the location bound to ``source`` to ``location`` (0 if unknown)."""
        origin = self.locations.get(source or "")
        if origin is None:
            return 0.0
        return float(self.matrix.get(origin, {}).get(location, 0.0))


def middleware(
    latency: LatencyMap, location: str
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """aiohttp middleware for the cluster at ``location``: wait the RTT, then answer."""

    @web.middleware
    async def delay(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        ms = latency.delay_ms(peer[0] if peer else None, location)
        if ms > 0:
            await asyncio.sleep(ms / 1000.0)
        return await handler(request)

    return delay
