"""The namespace controller: a deleted namespace stays Terminating while its content goes.

Deleting a namespace only marks it (phase Terminating, deletionTimestamp) - the Store refuses
new content in it with 403 from then on. This controller deletes the content after a short
delay, as the real one does after discovery, and removes the namespace once nothing is left;
objects held by finalizers keep it Terminating (with the conditions real servers set) and it
looks again every RETRY_SECONDS.
"""

from __future__ import annotations

import asyncio
import logging

from qonnect_testbed.store import Store

log = logging.getLogger(__name__)
DELETE_DELAY_SECONDS = 1.0
RETRY_SECONDS = 1.0


class NamespaceController:
    """Finalizes Terminating namespaces of one cluster."""

    name = "namespace"

    def __init__(self, store: Store, delay: float = DELETE_DELAY_SECONDS) -> None:
        self.store = store
        self.delay = delay
        self._pending: set[str] = set()

    def terminating(self, namespace: str) -> None:
        """Store hook: namespace was just marked for deletion."""
        if namespace not in self._pending:
            self._pending.add(namespace)
            asyncio.get_running_loop().call_later(self.delay, self._sync, namespace)

    def _sync(self, namespace: str) -> None:
        try:
            gone = self.store.finalize_namespace(namespace)
        except Exception:  # never stop the loop; look again later
            log.exception("namespace %s: finalization failed", namespace)
            gone = False
        if gone:
            self._pending.discard(namespace)
        else:
            asyncio.get_running_loop().call_later(RETRY_SECONDS, self._sync, namespace)
