"""Stale writes counted from the clusters' own records (for the tests and benchmarks/failover.py).

Every object a controller's migration writes carries the fencing stamp (term, seq, write time;
``keys.FENCING_ANNOTATION``). A write is stale when its term is older than a term that already
existed when it was written: a deposed leader wrote after a newer leader had raised the fence.
When terms began is taken from the KB: the fence (watched while the run lasts, since the KB keeps
only the newest) and the controller events with their tokens and times.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import keys
from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import read_stamp
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, get_client
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

KINDS = (("v1", "Namespace"), ("apps/v1", "Deployment"), ("v1", "Service"))


class TermHistory:
    """When each controller term was first seen in the KB (wall-clock seconds, the KB's clock)."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}

    def see(self, term: int, when: float | None) -> None:
        if term and when is not None and (term not in self.first or when < self.first[term]):
            self.first[term] = when

    def add_events(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            fencing = e.get("fencing") or {}
            self.see(int(fencing.get("term") or 0), e.get("ts"))

    def newer_before(self, term: int, when: float) -> int | None:
        """The newest term older than ``when`` that is newer than ``term`` (None: no such term)."""
        newer = [t for t, first in self.first.items() if t > term and first < when]
        return max(newer) if newer else None


class FenceWatch:
    """Polls the KB's fence in a thread and records when each term was first seen."""

    def __init__(self, admin: Any, history: TermHistory, interval: float = 0.2) -> None:
        self.admin, self.history, self.interval = admin, history, interval
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                fence = self.admin.request("GET", "/api/v1/fence")
                self.history.see(int(fence.get("term") or 0), fence.get("updated") or time.time())
            except (KBError, OSError, ValueError):
                pass  # a KB outage trial: nothing to see
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)


def stamped_objects(federation: dict[str, Any], app: str) -> list[dict[str, Any]]:
    """Every object of ``app`` on every cluster that carries a fencing stamp, read from the
    cluster itself: {cluster, object, term, seq, written}."""
    found = []
    for c in federation["clusters"]:
        client = get_client(c["name"], c["kubeconfig"], c.get("context"))
        for api_version, kind in KINDS:
            try:
                objs = client.list(api_version, kind, None, f"{keys.APP_LABEL}={app}")
            except K8sError:  # a failed cluster (a trial's fault) has no record to read
                continue
            for obj in objs:
                stamp = read_stamp(obj)
                if stamp:
                    meta = obj["metadata"]
                    name = f"{kind} {meta.get('namespace') or ''}/{meta['name']}"
                    found.append({"cluster": c["name"], "object": name, **stamp})
    return found


def stale_stamps(objects: list[dict[str, Any]], history: TermHistory) -> list[str]:
    """Objects written under a term older than one that existed when they were written."""
    stale = []
    for o in objects:
        newer = history.newer_before(int(o["term"]), float(o["written"]))
        if newer is not None:
            stale.append(
                f"{o['cluster']}: {o['object']} written at {o['written']} under term {o['term']} "
                f"after term {newer} began ({history.first[newer]})"
            )
    return stale
