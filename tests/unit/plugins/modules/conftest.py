"""Run qonnect.core modules in-process with ansible-core's patch_module_args.

The KB is an in-memory stand-in with the KBClient's method names and error behaviour (KBError
404 for missing records, 409 for stale fencing), so these tests check each module's own logic;
tests/integration/ansible runs the same modules against the real KB.
"""

from __future__ import annotations

import copy
import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application


class MemoryKB:
    def __init__(self):
        self.clusters: dict[str, dict] = {}
        self.apps: dict[str, dict] = {}
        self.placements: dict[str, dict] = {}
        self.events: list[dict] = []
        self.inventory_doc = {"clusters": [], "latency_ms": {}, "placements": {}}
        self.writes = 0

    def _get(self, table, name, what):
        if name not in table:
            raise KBError(404, f"{what} {name!r} does not exist")
        return copy.deepcopy(table[name])

    def get_cluster(self, name):
        return self._get(self.clusters, name, "cluster")

    def list_clusters(self):
        return [copy.deepcopy(c) for c in self.clusters.values()]

    def register_cluster(self, body):
        if body["name"] in self.clusters:
            raise KBError(409, "exists")
        self.writes += 1
        self.clusters[body["name"]] = dict(body, status={"healthy": False})
        return copy.deepcopy(self.clusters[body["name"]])

    def update_cluster(self, name, changes):
        self.writes += 1
        self.clusters[name].update(changes)
        return copy.deepcopy(self.clusters[name])

    def delete_cluster(self, name):
        self.writes += 1
        del self.clusters[name]

    def get_application(self, name):
        return self._get(self.apps, name, "application")

    def put_application(self, name, spec):
        app = load_application(spec).to_dict()  # the real KB validates the same way
        old = self.apps.get(name)
        if old and old["application"] == app:
            return dict(old, changed=False)
        self.writes += 1
        version = (old or {"version": 0})["version"] + 1
        self.apps[name] = {"name": name, "version": version, "spec": spec, "application": app}
        return dict(self.apps[name], changed=True)

    def delete_application(self, name):
        self.writes += 1
        del self.apps[name]

    def get_placement(self, app):
        return self._get(self.placements, app, "placement")

    def put_placement(self, app, placement, fencing=None):
        old = self.placements.get(app, {}).get("fencing")
        if old and fencing and (fencing["term"], fencing["seq"]) < (old["term"], old["seq"]):
            raise KBError(409, "stale fencing token")
        self.writes += 1
        self.placements[app] = dict(placement, fencing=fencing)
        return self.placements[app]

    def post_event(self, event):
        self.events.append(event)
        return dict(event, id=len(self.events))

    def inventory(self):
        return copy.deepcopy(self.inventory_doc)


@pytest.fixture
def kb():
    return MemoryKB()


@pytest.fixture
def run_module(monkeypatch, capsys, kb):
    """run_module(module, args, check_mode=False, diff=False) -> the module's JSON result."""

    def run(module, args, check_mode=False, diff=False):
        monkeypatch.setattr(module, "kb_client_from_params", lambda params: kb)
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
        with patch_module_args(args), pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)

    return run


def _memory_cluster_class():
    """The in-memory cluster API of the k8s unit tests (one definition for both suites)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "module_utils" / "k8s" / "conftest.py"
    spec = importlib.util.spec_from_file_location("qonnect_k8s_fakes", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MemoryCluster


@pytest.fixture
def memory_clusters(monkeypatch):
    """Clusters cloud-1, fog-1, edge-1 in memory; the deploy module's Deployer talks to them."""
    from ansible_collections.qonnect.core.plugins.modules import deploy

    cls = _memory_cluster_class()
    log: list = []
    clusters = {n: cls(n, log) for n in ("cloud-1", "fog-1", "edge-1", "edge-2")}
    real = deploy.Deployer

    def factory(*args, **kwargs):
        kwargs["client_factory"] = lambda target: clusters[target.name]
        return real(*args, **kwargs)

    monkeypatch.setattr(deploy, "Deployer", factory)
    return clusters, log
