"""Report sequence numbers that only grow, across agent restarts.

A number is the wall clock in microseconds, or the last number issued plus one when the clock
has not moved past it (fast calls, or a clock stepped backwards). The last number is persisted
in the state directory before it is used, so a restart after a clock step still continues above
it; without a state directory the clock alone keeps restarts growing. Microseconds since 1970
stay below 2**53, so the numbers survive JSON parsers that use doubles. The KB refuses numbers
beyond its own clock in microseconds plus 60 s (kb/trust.py); ``Resync`` handles its answers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        self._store(value)
        return value

    def advance(self, above: int) -> None:
        """Continue above ``above`` (a number the KB already holds for this cluster)."""
        if above > self.last:
            self._store(above)

    def restart(self) -> None:
        """Number from the clock again, forgetting a persisted number the KB refuses as being
        too far ahead of its clock (one written while this host's clock ran ahead)."""
        self._store(0)

    def _store(self, value: int) -> None:
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


class Resync:
    """Gets the agent's report numbers back in step when the KB stops applying its reports.

    ``applied: false`` for the report just numbered means the KB holds a newer ``seq`` for this
    cluster: a report sent with this cluster's token from elsewhere (a stolen token), or by this
    agent while its clock ran ahead. Left alone, every report would be "older" until the clock
    caught up and the cluster would look dead. The agent reads the stored seq and continues
    above it: the KB refuses any seq beyond its clock plus 60 s (kb/trust.py), so this costs at
    most a minute of the number space. A 422 naming ``seq`` means our own number is beyond that
    bound: numbering restarts from the clock. Each episode is logged once, when it starts.
    """

    def __init__(self, cluster: str, sequence: Sequence, kb: Any) -> None:
        self.cluster = cluster
        self.sequence = sequence
        self.kb = kb
        self.behind = False  # in an episode of reports the KB did not apply

    def acknowledged(self, report: dict, ack: Any) -> None:
        """Note the KB's answer to a delivered report."""
        if not isinstance(ack, dict) or ack.get("applied", True):
            if self.behind:
                log.warning("cluster %s: the KB applies this agent's reports again", self.cluster)
            self.behind = False
            return
        if report.get("seq") != self.sequence.last:
            return  # a buffered report overtaken by a newer one: the merge rule at work
        stored = self._stored_seq()
        if not self.behind:
            log.warning(
                "cluster %s: the KB did not apply report seq=%s, it holds seq=%s (a report from "
                "elsewhere with this cluster's token, or from a clock that ran ahead); continuing above it",
                self.cluster,
                report.get("seq"),
                stored,
            )
        self.behind = True
        if stored is not None:
            self.sequence.advance(stored)

    def refused(self, report: dict, exc: Exception) -> None:
        """Note a report the KB refused for good."""
        if getattr(exc, "status", 0) == 422 and "seq:" in str(exc):
            log.warning(
                "cluster %s: the KB refuses seq=%s as too far ahead of its clock; numbering from the clock",
                self.cluster,
                report.get("seq"),
            )
            self.sequence.restart()

    def _stored_seq(self) -> int | None:
        try:
            seq = self.kb.get_cluster(self.cluster)["status"]["seq"]
        except Exception as exc:  # the next unapplied report asks again
            log.debug("cannot read the stored seq of %s: %s", self.cluster, exc)
            return None
        return seq if isinstance(seq, int) else None
