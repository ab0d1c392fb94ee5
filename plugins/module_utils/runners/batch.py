# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Many applications' deploys in one module run: the controller's batch of committed decisions.

Why: a batch used to start one module process per application (Ansible's per-host start-up and
the kubernetes client's imports, about 0.6 of the 1 CPU-second each application cost). Here one
process deploys every item on a bounded pool of threads, each through the same runner as a
single deploy (``run_one``) with its own options and its own KB client; the Kubernetes clients
are shared per kubeconfig (k8s/client.py). Each item's outcome is reported under ``batch`` keyed
by its decision id; one item's failure never stops the others.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils import module as module_utils
from ansible_collections.qonnect.core.plugins.module_utils.errors import fail_fields
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule

# Options an item sets for itself; everything else (KB, kubeconfigs, waits) is the task's.
ITEM_OPTIONS = ("plan", "exclude", "scorer", "hysteresis", "fencing")


class ThreadModule:
    """What the deploy runner uses of a module for one application deployed on a thread of a
    batch or a list (runners/many.py): its options, check mode, and a KB client of its own (one
    per thread: a client's kept-alive connection is not shared)."""

    def __init__(self, module: QonnectModule, params: dict[str, Any]) -> None:
        self.params = params
        self.check_mode = module.check_mode
        self.diff = False
        self._kb: Any = None

    @property
    def kb(self) -> Any:
        if self._kb is None:
            self._kb = module_utils.kb_client_from_params(self.params)  # late-bound: the tests' seam
        return self._kb


class ItemModule(ThreadModule):
    """One item of a batch: the task's options overlaid with the item's."""

    def __init__(self, module: QonnectModule, item: dict[str, Any]) -> None:
        params = dict(module.params, batch=None, name=item["app"])
        for key in ITEM_OPTIONS:
            if item.get(key) is not None:
                params[key] = item[key]
        reason = item.get("reason") or "migration"
        params["reason"] = f"{reason} (decision {item['decision_id']})"
        super().__init__(module, params)


def run_batch(module: QonnectModule, run_one: Callable[[Any], dict]) -> dict[str, Any]:
    """Every item of ``batch`` deployed (at most ``batch_workers`` at once): per decision id,
    ``ok``, ``changed``, ``msg`` and the placement applied; the run itself fails only when its
    input does."""
    items = list(module.params["batch"])

    def one(item: dict[str, Any]) -> dict[str, Any]:
        try:
            result = run_one(ItemModule(module, item))
        except Exception as exc:  # one item's error is its outcome, not the batch's
            return {"app": item["app"], "ok": False, "changed": False, "msg": fail_fields(exc)["msg"]}
        return {
            "app": item["app"],
            "ok": not result.get("failed"),
            "changed": bool(result.get("changed")),
            "msg": str(result.get("message") or ""),
            "plan": result.get("plan"),
            "warnings": result.get("warnings") or [],
        }

    workers = max(1, min(len(items), int(module.params.get("batch_workers") or 1)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qonnect-batch") as pool:
        outcomes = list(pool.map(one, items))
    batch = {items[i]["decision_id"]: outcome for i, outcome in enumerate(outcomes)}
    warnings = [f"{o['app']}: {w}" for o in outcomes for w in o.pop("warnings", [])]
    done = sum(1 for o in outcomes if o["ok"])
    return {
        "changed": any(o["changed"] for o in outcomes),
        "batch": batch,
        "message": f"{done} of {len(items)} applications deployed"
        + "".join(f"; {o['app']} failed: {o['msg']}" for o in outcomes if not o["ok"]),
        "warnings": warnings,
    }
