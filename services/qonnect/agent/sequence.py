"""Report sequence numbers that only grow, across agent restarts.

A number is the wall clock in microseconds, or the last number issued plus one when the clock
has not moved past it (fast calls, or a clock stepped backwards). The last number is persisted
in the state directory before it is used, so a restart after a clock step still continues above
it; without a state directory the clock alone keeps restarts growing. Microseconds since 1970
stay below 2**53, so the numbers survive JSON parsers that use doubles.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


class Sequence:
    """Issues strictly increasing report sequence numbers."""

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self.path = Path(path) if path else None
        self._clock_us = clock_us
        self.last = self._load()

    def _load(self) -> int:
        if self.path is None or not self.path.exists():
            return 0
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError) as exc:
            log.warning("sequence file %s unreadable (%s); continuing from the clock", self.path, exc)
            return 0

    def next(self) -> int:
        value = max(self._clock_us(), self.last + 1)
        if self.path is not None:
            tmp = self.path.with_name(self.path.name + ".tmp")
            try:
                with open(tmp, "w") as fh:
                    fh.write(str(value))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:  # the clock still keeps numbers growing across restarts
                log.warning("cannot write sequence file %s: %s", self.path, exc)
        self.last = value
        return value
