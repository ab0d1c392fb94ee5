"""Bounded outbox of reports kept while the KB is unreachable.

Each report is a full snapshot of its cluster, so two consecutive reports merge into one without
losing anything current: per key (the cluster itself, its node list, its workload list, each
peer latency) the value of the newer report wins, and keys only the older one has are kept.
When the outbox is full the two OLDEST reports are merged, so recent history stays exact and old
history is compacted. The outbox is persisted (when given a path) so a restarted agent still
delivers what it buffered, in order.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# snapshot keys: replaced as a whole by a newer report that carries them
SNAPSHOT_KEYS = ("nodes", "workloads")


def merge_reports(older: dict, newer: dict) -> dict:
    """One report equivalent to applying ``older`` then ``newer`` under the KB's merge rule.

    If ``newer`` is actually older (by ``seq``), the arguments are swapped, so the result never
    goes back in time.
    """
    if older["seq"] > newer["seq"]:
        older, newer = newer, older
    merged = dict(newer)
    for key in SNAPSHOT_KEYS:
        if newer.get(key) is None and older.get(key) is not None:
            merged[key] = older[key]
    merged["latencies"] = {**(older.get("latencies") or {}), **(newer.get("latencies") or {})}
    return merged


class Outbox:
    """FIFO of reports bounded to ``capacity`` entries; compacts the oldest when full."""

    def __init__(self, capacity: int = 120, path: str | os.PathLike | None = None) -> None:
        if capacity < 2:
            raise ValueError("outbox capacity must be at least 2")
        self.capacity = capacity
        self.path = Path(path) if path else None
        self.compacted = 0  # reports folded into others since start
        self._items: deque[dict] = deque(self._load())
        self._dirty = False  # changed since the file was last written
        self._disk_empty = not self._items  # the file holds no report (or does not exist)
        while len(self._items) > capacity:
            self._compact_oldest()

    def _load(self) -> list[dict]:
        if self.path is None or not self.path.exists():
            return []
        try:
            items = json.loads(self.path.read_text())
            if isinstance(items, list) and all(isinstance(i, dict) and "seq" in i for i in items):
                return sorted(items, key=lambda r: r["seq"])
            raise ValueError("expected a list of reports")
        except (OSError, ValueError) as exc:
            log.warning("discarding unreadable outbox %s: %s", self.path, exc)
            return []

    def save(self) -> None:
        """Write the outbox to its file (atomically) if it changed since the last save.

        An agent whose KB takes every report at once pushes and pops one report per tick and
        so never writes: the file stays the empty outbox it already holds.
        """
        if self.path is None or not self._dirty:
            return
        if not self._items and self._disk_empty:
            self._dirty = False
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "w") as fh:
                json.dump(list(self._items), fh, separators=(",", ":"))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._dirty, self._disk_empty = False, not self._items
        except OSError as exc:  # a full or vanished disk: keep buffering in memory
            log.warning("cannot write outbox %s: %s", self.path, exc)

    def _compact_oldest(self) -> None:
        first = self._items.popleft()
        second = self._items.popleft()
        self._items.appendleft(merge_reports(first, second))
        self.compacted += 1

    def push(self, report: dict, save: bool = True) -> None:
        """Append a report; ``save=False`` leaves writing to a later save()."""
        self._items.append(report)
        self._dirty = True
        while len(self._items) > self.capacity:
            self._compact_oldest()
        if save:
            self.save()

    def peek(self) -> dict | None:
        return self._items[0] if self._items else None

    def pop(self) -> dict:
        """Remove the oldest report in memory only: call save() after a batch of pops.

        Should the agent die before that save, the restarted agent sends some reports twice,
        which the KB's merge ignores; saving after every pop would rewrite the file once per
        report of a long backlog.
        """
        self._dirty = True
        return self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[dict]:
        return iter(list(self._items))
