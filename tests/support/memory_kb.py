"""An in-memory Knowledge Base with the KBClient's method names, answers and errors, for tests
that check a module's own logic without a KB process. It stands in for the real KB only as far
as tests/integration/kb/test_kb_contract.py shows: the same calls, on it and on a real KB, give
the same results and the same KBError statuses."""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError, load_application


def _token(fencing: dict | None) -> tuple[int, int] | None:
    return None if not fencing else (int(fencing["term"]), int(fencing["seq"]))


class MemoryKB:
    """Plays every role (admin and controller); ``writes`` counts the writes it accepted."""

    def __init__(self) -> None:
        self.clusters: dict[str, dict] = {}
        self.apps: dict[str, dict] = {}
        self.placements: dict[str, dict] = {}
        self.events: list[dict] = []
        self.fence = {"term": 0, "seq": 0, "updated": None}
        self.inventory_doc: dict[str, Any] = {"clusters": [], "latency_ms": {}, "placements": {}}
        self.writes = 0

    @staticmethod
    def _get(table: dict, name: str, what: str) -> dict:
        if name not in table:
            raise KBError(404, f"{what} {name!r} does not exist")
        return copy.deepcopy(table[name])

    # -- clusters ----------------------------------------------------------------------------
    def get_cluster(self, name: str) -> dict:
        return self._get(self.clusters, name, "cluster")

    def list_clusters(self) -> list[dict]:
        return [copy.deepcopy(c) for c in self.clusters.values()]

    def register_cluster(self, body: dict) -> dict:
        if body["name"] in self.clusters:
            raise KBError(409, f"cluster {body['name']!r} already exists")
        self.writes += 1
        self.clusters[body["name"]] = dict(copy.deepcopy(body), status={"healthy": False})
        return copy.deepcopy(self.clusters[body["name"]])

    def update_cluster(self, name: str, changes: dict) -> dict:
        self._get(self.clusters, name, "cluster")
        self.writes += 1
        self.clusters[name].update(copy.deepcopy(changes))
        return copy.deepcopy(self.clusters[name])

    def delete_cluster(self, name: str) -> None:
        self._get(self.clusters, name, "cluster")
        self.writes += 1
        del self.clusters[name]

    # -- applications ------------------------------------------------------------------------
    def get_application(self, name: str) -> dict:
        return self._get(self.apps, name, "application")

    def list_applications(self) -> list[dict]:
        return [copy.deepcopy(a) for a in self.apps.values()]

    def put_application(self, name: str, spec: dict) -> dict:
        try:
            app = load_application(spec).to_dict()  # the real KB validates the same way
        except QosSpecError as exc:
            raise KBError(422, "; ".join(exc.errors)) from None
        if app["name"] != name:
            raise KBError(422, f"metadata.name: {app['name']!r} is not the application {name!r}")
        old = self.apps.get(name)
        if old and old["application"] == app:
            return dict(copy.deepcopy(old), changed=False)
        self.writes += 1
        version = (old or {"version": 0})["version"] + 1
        self.apps[name] = {"name": name, "version": version, "spec": copy.deepcopy(spec), "application": app}
        return dict(copy.deepcopy(self.apps[name]), changed=True)

    def delete_application(self, name: str) -> None:
        self._get(self.apps, name, "application")
        self.writes += 1
        del self.apps[name]
        self.placements.pop(name, None)

    # -- placements and the controller fence ---------------------------------------------------
    def get_placement(self, app: str) -> dict:
        return self._get(self.placements, app, "placement")

    def put_placement(self, app: str, placement: dict, fencing: dict | None = None) -> dict:
        token, stored = _token(fencing), self.placements.get(app, {})
        if token is not None:
            if token < _token(self.fence):
                raise KBError(409, "stale fencing token: a newer controller leader holds the fence")
            old = _token(stored.get("fencing"))
            if old is not None and token < old:
                raise KBError(409, "stale fencing token")
            if old == token and {k: stored.get(k) for k in placement} != placement:
                raise KBError(409, "this fencing token already wrote a different placement")
        self.writes += 1
        record = {
            "application": app,
            "desired": stored.get("desired"),
            "current": stored.get("current"),
            "fencing": stored.get("fencing"),
        }
        record.update(copy.deepcopy(placement))
        if fencing is not None:
            record["fencing"] = {"term": token[0], "seq": token[1]}
        self.placements[app] = record
        return copy.deepcopy(record)

    def get_fence(self) -> dict:
        return dict(self.fence)

    def raise_fence(self, token: dict) -> dict:
        new = _token(token)
        if new < _token(self.fence):
            raise KBError(409, "stale fencing token: a newer controller leader holds the fence")
        self.fence = {"term": new[0], "seq": new[1], "updated": 0.0}
        return dict(self.fence)

    # -- events and inventory ------------------------------------------------------------------
    def post_event(self, event: dict) -> dict:
        self.events.append(copy.deepcopy(event))
        return dict(copy.deepcopy(event), id=len(self.events))

    def list_events(self, since=None, application=None, cluster=None, limit=100) -> list[dict]:
        found = [
            dict(e, id=i + 1)
            for i, e in enumerate(self.events)
            if application in (None, e.get("application")) and cluster in (None, e.get("cluster"))
        ]
        return found[-limit:]

    def inventory(self) -> dict:
        return copy.deepcopy(self.inventory_doc)
