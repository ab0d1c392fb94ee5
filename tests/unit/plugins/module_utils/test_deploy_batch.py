"""The deploy module's batch option (runners/batch.py): one run, many applications, each its own
options and outcome; one item's failure or error never stops the others."""

from __future__ import annotations

import threading
import time

from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.runners.batch import run_batch


class Task:
    """The task-level module a batch runs under (the options migrate.yml gives the task)."""

    check_mode = False

    def __init__(self, batch, workers=10):
        self.params = {
            "batch": batch,
            "batch_workers": workers,
            "kb_url": "http://127.0.0.1:9",
            "kb_token": "t",
            "scorer": "weighted",
            "exclude": [],
            "hysteresis": 0.1,
            "wait_timeout": 90.0,
            "name": None,
            "plan": None,
            "fencing": None,
            "reason": None,
        }


def item(app, did, **extra):
    return {"app": app, "decision_id": did, "fencing": {"term": 3, "seq": int(did[-1])}, **extra}


def test_each_item_runs_with_its_own_options_over_the_tasks():
    seen = {}

    def deploy(module):
        seen[module.params["name"]] = dict(module.params)
        return {"changed": True, "failed": False, "message": f"deployed {module.params['name']}"}

    plan = {"services": {"web": [{"cluster": "edge-2", "replicas": 1}]}}
    got = run_batch(
        Task(
            [
                item("a", "d1.1", plan=plan, reason="cluster edge-1 failed"),
                item("b", "d1.2", scorer="optimal"),
            ]
        ),
        deploy,
    )
    assert seen["a"]["plan"] == plan and seen["a"]["fencing"] == {"term": 3, "seq": 1}
    assert seen["a"]["reason"] == "cluster edge-1 failed (decision d1.1)"
    assert seen["a"]["batch"] is None, "an item is a single deploy, never a batch again"
    assert (
        seen["b"]["scorer"] == "optimal" and seen["b"]["plan"] is None and seen["b"]["wait_timeout"] == 90.0
    )
    assert seen["b"]["reason"] == "migration (decision d1.2)"
    assert got["batch"]["d1.1"]["ok"] and got["batch"]["d1.2"]["msg"] == "deployed b"
    assert got["changed"] and got["message"] == "2 of 2 applications deployed"


def test_a_failed_or_broken_item_is_its_own_outcome():
    def deploy(module):
        name = module.params["name"]
        if name == "refused":
            return {"changed": False, "failed": True, "message": "cloud-2 refused: Forbidden"}
        if name == "bad":
            raise InputError("name", "no application 'bad' in the Knowledge Base")
        if name == "bug":
            raise KeyError("services")
        return {"changed": True, "failed": False, "message": "ok", "warnings": ["slow pull"]}

    got = run_batch(
        Task([item(n, f"d2.{i}") for i, n in enumerate(["good", "refused", "bad", "bug"])]), deploy
    )
    out = got["batch"]
    assert out["d2.0"]["ok"] and not out["d2.1"]["ok"] and not out["d2.2"]["ok"] and not out["d2.3"]["ok"]
    assert out["d2.1"]["msg"] == "cloud-2 refused: Forbidden"
    assert out["d2.2"]["msg"] == "name: no application 'bad' in the Knowledge Base"
    assert "unexpected KeyError" in out["d2.3"]["msg"] and "Traceback" not in out["d2.3"]["msg"]
    assert got["message"].startswith("1 of 4 applications deployed; refused failed: cloud-2 refused")
    assert got["warnings"] == ["good: slow pull"]


def test_at_most_batch_workers_deploy_at_once_and_each_has_its_own_kb_client():
    running, peak, lock, clients = [0], [0], threading.Lock(), []

    def deploy(module):
        clients.append(module.kb)
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return {"changed": False, "failed": False, "message": "unchanged"}

    got = run_batch(Task([item(f"app{i}", f"d3.{i}") for i in range(9)], workers=3), deploy)
    assert peak[0] == 3
    assert len({id(c) for c in clients}) == 9, "a KB client per item: threads never share one"
    assert not got["changed"] and len(got["batch"]) == 9
