# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A namespace that is still being deleted cannot be used: wait until it is gone.

Moving an application off a cluster deletes its namespace; on a real cluster the namespace then
stays ``Terminating`` while the namespace controller deletes its content (seconds to minutes),
and every create in it is refused (403 "namespace ... is being terminated"). Moving the
application straight back must therefore wait for the old namespace to disappear and then create
it afresh, instead of failing on the first write.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError


def is_terminating(namespace: dict | None) -> bool:
    """True for a namespace being deleted (deletionTimestamp set or phase Terminating)."""
    if not namespace:
        return False
    meta, status = namespace.get("metadata") or {}, namespace.get("status") or {}
    return bool(meta.get("deletionTimestamp")) or status.get("phase") == "Terminating"


def usable_namespace(
    client: Any,
    name: str,
    timeout: float,
    interval: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict | None:
    """The live namespace, or None when it does not exist (any more): never a Terminating one.

    Raises K8sError (HTTP 409) naming the namespace when it is still terminating after
    ``timeout`` seconds, so deploy fails on that cluster with a clear message.
    """
    deadline = clock() + max(0.0, timeout)
    while True:
        live = client.get("v1", "Namespace", name)
        if not is_terminating(live):
            return live
        remaining = deadline - clock()
        if remaining <= 0:
            raise K8sError(
                getattr(client, "name", "-"),
                f"namespace {name} is still terminating after {timeout:g}s (its old objects are "
                "being deleted); retry later",
                409,
            )
        sleep(min(interval, remaining))
        interval = min(interval * 1.5, 2.0)
