"""The leader's own look at a suspect cluster's API, before anything moves away from it.

An agent's silence or its "unreachable" is one witness; a migration deletes workloads, so it
needs a second one. For each suspect cluster the leader asks the cluster's API itself, through
the kubeconfig of the cluster's KB record (the same client the reconciler uses). Any HTTP
answer that is not a server error (a 401/403 included: someone answers) means the cluster is
up; no answer, or 5xx, confirms the agent.

Bounded, so a slow cluster never stalls the loop: probes run in a small thread pool (at most
``max_parallel`` at once, one per cluster), each with a short timeout, and ``probes()`` only
returns what has finished: a result is reused for ``ttl`` seconds and then refreshed in the
background. While the refresh runs, an "it answers" result is still returned (up to ``3 * ttl``
old: an agent-down cluster does not flap back to "not probed yet"), a "no answer" one is not:
a cluster is confirmed down only on a probe at most ``ttl`` old, and one without such a result
is "not confirmed yet" (the detector keeps it suspect, never down).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, raw_get
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import record_client

from qonnect.controller.detector import ApiProbe
from qonnect.controller.records import Fetch, RecordCache, as_cache

log = logging.getLogger(__name__)

PROBE_PATH = "/api/v1/namespaces"  # served by every API server; reading it needs etcd too
PROBE_TIMEOUT = 2.0
PROBE_TTL = 3.0
MAX_PARALLEL = 4
# a probe still running after this long is an answer too: none (the client retries a refused
# connection 3 times with PROBE_TIMEOUT each, so a probe that can return has returned by then)
PROBE_GIVE_UP = 4 * PROBE_TIMEOUT + 2.0


def probe_cluster(name: str, record: dict[str, Any], timeout: float = PROBE_TIMEOUT) -> ApiProbe:
    """Ask one cluster's API for one namespace through its KB record's kubeconfig."""
    now = time.time()
    if not record.get("kubeconfig"):
        return ApiProbe(None, "no kubeconfig in its KB record: the controller cannot look itself", now)
    try:
        raw_get(record_client(name, record).api, PROBE_PATH, {"limit": "1"}, timeout)
    except K8sError as exc:  # the kubeconfig cannot be loaded: no evidence either way
        return ApiProbe(None, f"cannot probe: {exc.message}", now)
    except Exception as exc:  # the client's many transport errors; status when the API answered
        status = int(getattr(exc, "status", 0) or 0)
        if 0 < status < 500:
            return ApiProbe(True, f"the API answers (HTTP {status})", now)
        if status:
            return ApiProbe(False, f"the API answers HTTP {status}: it cannot serve", now)
        cause = getattr(exc, "reason", None) or exc
        text = str(cause).strip().splitlines()[0][:200] if str(cause).strip() else ""
        return ApiProbe(False, f"no answer from the API ({type(cause).__name__}: {text})", now)
    return ApiProbe(True, "the API answers (HTTP 200)", now)


class Confirmer:
    """Cached, bounded background probes of suspect clusters, on behalf of the leader."""

    def __init__(
        self,
        records: RecordCache | Fetch,
        probe: Callable[[str, dict[str, Any]], ApiProbe] = probe_cluster,
        ttl: float = PROBE_TTL,
        max_parallel: int = MAX_PARALLEL,
        give_up: float = PROBE_GIVE_UP,
    ) -> None:
        self.records = as_cache(records)  # the KB's cluster records, with credentials
        self.probe = probe
        self.ttl = ttl
        self.give_up = give_up
        self.started: dict[str, tuple[float, int]] = {}  # cluster -> (start, generation) of its probe
        self.generation = 0
        self.pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="confirm")
        self.lock = threading.Lock()
        self.results: dict[str, ApiProbe] = {}
        self.running: dict[str, Future[ApiProbe]] = {}

    def probes(self, suspects: Iterable[str]) -> dict[str, ApiProbe]:
        """The fresh results for these clusters; a probe is started for each without one."""
        now = time.time()
        fresh: dict[str, ApiProbe] = {}
        wanted = sorted(set(suspects))
        with self.lock:
            for name in list(self.results):
                if name not in wanted:
                    del self.results[name]  # a new suspicion gets a new probe
            for name in wanted:
                began = self.started.get(name)
                if name in self.running and began is not None and now - began[0] > self.give_up:
                    # a probe that never returns must not freeze the judgement (no result would
                    # keep the cluster "not confirmed yet" for ever): no answer in time is no answer
                    del self.running[name]
                    self.results[name] = ApiProbe(
                        False,
                        f"no answer from the API within {self.give_up:g}s (the probe did not return)",
                        now,
                    )
                    log.warning(
                        "probe of cluster %s did not return within %gs: taken as no answer",
                        name,
                        self.give_up,
                    )
                result = self.results.get(name)
                if result is not None and now - result.at <= (3 * self.ttl if result.reachable else self.ttl):
                    fresh[name] = result  # refreshed below once older than ttl: no gap between probes
                if (result is None or now - result.at > self.ttl) and name not in self.running:
                    self.generation += 1
                    self.started[name] = (now, self.generation)
                    self.running[name] = self.pool.submit(self._probe, name, self.generation)
        return fresh

    def _probe(self, name: str, generation: int = 0) -> ApiProbe:
        try:
            record = self.records.get(name)
            result = (
                self.probe(name, record)
                if record is not None
                else ApiProbe(None, "the KB has no record of it", time.time())
            )
        except Exception as exc:  # the KB away, a bug: not confirmed either way, logged
            log.warning("probing cluster %s failed: %s", name, exc)
            result = ApiProbe(None, f"cannot probe: {exc}", time.time())
        with self.lock:
            if self.started.get(name, (0.0, generation))[1] == generation:  # not given up on since
                self.results[name] = result
                self.running.pop(name, None)
        return result

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
