"""The KB's cluster records (with credentials) as the leader's own probes read them.

Confirming a suspect cluster (controller/confirm.py) and a capacity claim
(controller/capacity.py) both need the cluster's kubeconfig from its KB record. The full list is
one GET of every registered cluster (1000 in a large fleet), so it is read at most every ``ttl``
seconds and shared by every reader; a name not in the last list (a cluster registered since)
triggers an earlier read, but not more often than every ``min_gap`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

TTL = 30.0
MIN_GAP = 2.0

Fetch = Callable[[], list[dict[str, Any]]]


class RecordCache:
    """``get(name)``: the cluster's KB record, from a list read at most every ``ttl`` seconds."""

    def __init__(self, fetch: Fetch, ttl: float = TTL, min_gap: float = MIN_GAP) -> None:
        self.fetch = fetch  # kb.list_clusters
        self.ttl = ttl
        self.min_gap = min_gap
        self.lock = threading.Lock()
        self.known: dict[str, dict[str, Any]] = {}
        self.read_at = float("-inf")
        self.reads = 0

    def get(self, name: str) -> dict[str, Any] | None:
        with self.lock:  # one reader fetches; the others wait for its list
            age = time.monotonic() - self.read_at
            if age > self.ttl or (name not in self.known and age > self.min_gap):
                self.known = {r["name"]: r for r in self.fetch() if isinstance(r, dict) and "name" in r}
                self.read_at = time.monotonic()
                self.reads += 1
            return self.known.get(name)


def as_cache(records: RecordCache | Fetch) -> RecordCache:
    """A shared cache as given, or one of its own around a plain fetch function (tests)."""
    return records if isinstance(records, RecordCache) else RecordCache(records)
