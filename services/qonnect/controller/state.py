"""The state the controller's jobs share, one small record each: the loop (loop.py) creates them
and hands every job the ones it reads or writes, so what crosses a module boundary is named here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

from qonnect.controller.detector import Memory

if TYPE_CHECKING:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient


@dataclass
class Lead:
    """This replica's lead: leadership.py takes it (and drops it); every job that acts reads it,
    and each of its KB writes carries ``token``."""

    term: int | None = None  # the term this replica leads (None: it does not)
    token: dict[str, int] | None = None  # the fence this leader raised in the KB
    since: float = 0.0  # monotonic time it took the lead (a predecessor's lease runs from here)
    reconciled: bool = False  # decisions the log lost were re-decided from the KB (deciding.py)
    memory: Memory = field(default_factory=Memory)  # the detector's memory: afresh every lead
    # decision id -> why it waits (announced once per reason; afresh every lead)
    deferred_why: dict[str, str] = field(default_factory=dict)


@dataclass
class Why:
    """The status's answer to "why does this replica (not) make decisions?": each job that stops
    a tick short says why here, and the tick's end says what the leader watches."""

    text: str = "starting"


@dataclass
class Wake:
    """When the loop runs its next tick: at once once ``event`` is set (a finished run to
    report, a stop), at ``at`` (monotonic) if that is sooner than a tick, else a tick later."""

    event: threading.Event = field(default_factory=threading.Event)
    at: float | None = None


@dataclass
class KBContact:
    """Since when the KB answers without a gap: heartbeat staleness counts only after a whole
    heartbeat timeout of it (a KB outage, or a stall of this host, is not a mass failover)."""

    ok_since: float | None = None  # monotonic start of the current run of good KB reads
    state: str = "not contacted yet"  # what the status says of the KB
    last_ping: float = 0.0  # monotonic time of a follower's last health check

    def heard(self, ok: bool, exc: Exception | None = None) -> None:
        """Track since when the KB answers without a gap (a gap restarts the heartbeat grace)."""
        if ok:
            self.state = "ok"
            if self.ok_since is None:
                self.ok_since = time.monotonic()
        else:
            self.state = f"unreachable: {exc}"
            self.ok_since = None

    def restart_grace(self) -> None:
        """Heartbeats count again only once agents had a whole timeout to be heard from now."""
        if self.ok_since is not None:
            self.ok_since = time.monotonic()

    def ping(self, kb: KBClient, heartbeat_timeout: float) -> None:
        """Followers keep track of the KB too, so a new leader knows whether it just came back."""
        if time.monotonic() - self.last_ping < min(5.0, heartbeat_timeout / 3):
            return
        self.last_ping = time.monotonic()
        try:
            kb.healthz()
            self.heard(True)
        except KBError as exc:
            self.heard(False, exc)
