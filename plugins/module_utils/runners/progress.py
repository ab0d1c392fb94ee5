# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress of a deploy that waits on a slow rollout, as KB events (issue 34.8).

A module cannot print while it runs, so a deploy waiting minutes on a rollout looked like a hang.
The deployer's wait calls this hook (``Deployer(progress=...)``, k8s/waiter.py ``on_poll``) on
every poll with the workloads still pending; every PROGRESS_SECONDS per cluster it posts one
``deploy``/``Waiting`` event, which ``qonnect status`` and the status page show:
``waiting for Deployment/web on cloud-1: 0 of 1 replicas ready (10 s of 300 s)``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

PROGRESS_SECONDS = 10.0  # between two progress events of one cluster; none for a faster rollout
MAX_MESSAGE = 1000


class Progress:
    """The deployer's progress hook for one application; clusters wait in parallel threads."""

    def __init__(self, kb: Any, application: str, timeout: float, interval: float | None = None):
        self.kb = kb
        self.application = application
        self.timeout = timeout
        self.interval = PROGRESS_SECONDS if interval is None else interval
        self.started: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.posted = 0
        self._lock = threading.Lock()

    def __call__(self, cluster: str, pending: list[str]) -> None:
        now = time.monotonic()
        with self._lock:
            started = self.started.setdefault(cluster, now)
            if not pending or now - self.last.get(cluster, started) < self.interval:
                return
            self.last[cluster] = now
            first, rest = pending[0], pending[1:]
            workload, _sep, why = first.partition(": ")
            text = f"waiting for {workload} on {cluster}: {why}"
            if rest:
                text += "; " + "; ".join(rest)
            text = text[: MAX_MESSAGE - 20] + f" ({now - started:.0f} s of {self.timeout:.0f} s)"
            try:
                self.kb.post_event(
                    {
                        "type": "deploy",
                        "reason": "Waiting",
                        "application": self.application,
                        "cluster": cluster,
                        "message": text,
                    }
                )
                self.posted += 1
            except KBError:  # progress only: the deploy's outcome is recorded whatever happens
                pass
