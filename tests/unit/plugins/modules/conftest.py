"""Run qonnect.core modules in-process with ansible-core's patch_module_args.

The KB is tests/support/memory_kb.py, an in-memory stand-in that passes the same contract test
as the real KB (tests/integration/kb/test_kb_contract.py), so these tests check each module's own
logic; tests/integration/ansible runs the same modules against the real KB.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from support.memory_kb import MemoryKB


@pytest.fixture
def kb():
    return MemoryKB()


@pytest.fixture
def run_module(monkeypatch, capsys, kb):
    """run_module(module, args, check_mode=False, diff=False) -> the module's JSON result.

    Every module reaches the KB through the runner's client factory (module_utils/module.py),
    so this one seam gives each of them the in-memory KB."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings
    from ansible_collections.qonnect.core.plugins.module_utils import module as runner

    monkeypatch.setattr(runner, "kb_client_from_params", lambda params: kb)
    # a module runs in a process of its own: its warnings go into its result, not to the
    # controller's display (an earlier test in this worker may have loaded controller code), and
    # none of an earlier run's is left over
    monkeypatch.setattr(_internal, "is_controller", False)

    def run(module, args, check_mode=False, diff=False):
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
        warnings._global_warnings.clear()
        with patch_module_args(args), pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture
def memory_clusters(monkeypatch):
    """Clusters cloud-1, fog-1, edge-1 in memory; the deploy module's Deployer talks to them."""
    from ansible_collections.qonnect.core.plugins.module_utils.k8s import render
    from ansible_collections.qonnect.core.plugins.module_utils.runners import deploy
    from support.memory_cluster import MemoryCluster as cls

    log: list = []
    clusters = {n: cls(n, log) for n in ("cloud-1", "fog-1", "edge-1", "edge-2")}
    real = deploy.Deployer

    def factory(*args, **kwargs):
        kwargs["client_factory"] = lambda target: clusters[target.name]
        return real(*args, **kwargs)

    # The deploy runner builds its Deployer through k8s/render.py (one renderer with the reconciler).
    monkeypatch.setattr(deploy, "Deployer", factory)
    monkeypatch.setattr(render, "Deployer", factory)
    return clusters, log


ROOT = Path(__file__).resolve().parents[4]
ENERGY = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())


@pytest.fixture
def federation(run_module, kb, memory_clusters):
    """The paper's clusters registered in the KB and in memory, bookinfo (energy first)
    stored: (cluster names, the in-memory clusters' write log)."""
    clusters, log = memory_clusters
    for name in clusters:
        kb.clusters[name] = {
            "name": name,
            "tier": name.split("-")[0],
            "kubeconfig": f"/k/{name}.yaml",
            "labels": {},
        }
    kb.inventory_doc = {
        "clusters": [c for c in PAPER["clusters"] if c["name"] in clusters],
        "latency_ms": PAPER.get("latency_ms", {}),
        "placements": {},
    }
    from ansible_collections.qonnect.core.plugins.modules import application

    run_module(application, {"src": ENERGY})
    return clusters, log
