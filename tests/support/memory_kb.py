"""An in-memory Knowledge Base with the KBClient's method names, answers and errors, for tests
that check a module's own logic without a KB process. It stands in for the real KB only as far
as tests/integration/kb/test_kb_contract.py shows: the same calls, on it and on a real KB, give
the same results and the same KBError statuses."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError, load_application
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent


def _token(fencing: dict | None) -> tuple[int, int] | None:
    return None if not fencing else (int(fencing["term"]), int(fencing["seq"]))


class MemoryKB:
    """Plays every role (admin and controller); ``writes`` counts the writes it accepted."""

    def __init__(self) -> None:
        self.clusters: dict[str, dict] = {}
        self.apps: dict[str, dict] = {}
        self.placements: dict[str, dict] = {}
        self.events: list[dict] = []
        self.history_rows: list[dict] = []
        self.versions: dict[str, list[dict]] = {}
        self.fence = {"term": 0, "seq": 0, "updated": None}
        self.inventory_doc: dict[str, Any] = {"clusters": [], "latency_ms": {}, "placements": {}}
        self.writes = 0
        # the change feed: a revision per write; what each record last changed at, and removals
        self.instance = uuid.uuid4().hex[:12]
        self.rev = 0
        self.stamps: dict[tuple[str, str], int] = {}
        self.removals: dict[tuple[str, str], int] = {}

    def _touch(self, kind: str, name: str, removed: bool = False) -> None:
        self.rev += 1
        if removed:
            self.stamps.pop((kind, name), None)
            self.removals[(kind, name)] = self.rev
        else:
            self.stamps[(kind, name)] = self.rev
            self.removals.pop((kind, name), None)

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
        self._touch("cluster", body["name"])
        return copy.deepcopy(self.clusters[body["name"]])

    def update_cluster(self, name: str, changes: dict) -> dict:
        self._get(self.clusters, name, "cluster")
        self.writes += 1
        self.clusters[name].update(copy.deepcopy(changes))
        self._touch("cluster", name)
        return copy.deepcopy(self.clusters[name])

    def delete_cluster(self, name: str) -> None:
        self._get(self.clusters, name, "cluster")
        self.writes += 1
        del self.clusters[name]
        self._touch("cluster", name, removed=True)

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
        self.apps[name] = {
            "name": name,
            "version": version,
            "spec": copy.deepcopy(spec),
            "application": app,
            "policy": (old or {}).get("policy"),
        }
        self.versions.setdefault(name, []).append(
            {
                "version": version,
                "spec": copy.deepcopy(spec),
                "application": copy.deepcopy(app),
                "rollback": None,
            }
        )
        self._touch("application", name)
        return dict(copy.deepcopy(self.apps[name]), changed=True)

    def application_versions(self, name: str) -> list[dict]:
        self._get(self.apps, name, "application")
        return copy.deepcopy(self.versions.get(name, []))

    def roll_back(
        self, name: str, failing: int, restores: int, reason: str, fencing: dict | None = None
    ) -> dict:
        current = self._get(self.apps, name, "application")
        if current["version"] != failing:
            raise KBError(409, f"failing: {name} is at version {current['version']}, not {failing}")
        if restores >= failing:
            raise KBError(422, f"restores: version {restores} is not older than the failing {failing}")
        old = next((v for v in self.versions.get(name, []) if v["version"] == restores), None)
        if old is None:
            raise KBError(404, f"version {name}@{restores} does not exist")
        record = {"failing": failing, "restores": restores, "by": "admin", "reason": reason}
        done = self.put_application(name, old["spec"])
        if done["changed"]:
            self.versions[name][-1]["rollback"] = record
        return {"version": done["version"], "changed": done["changed"], "rollback": record}

    def delete_application(self, name: str) -> None:
        self._get(self.apps, name, "application")
        self.writes += 1
        del self.apps[name]
        self.versions.pop(name, None)
        self.placements.pop(name, None)
        self._touch("application", name, removed=True)
        self.stamps.pop(("placement", name), None)

    # -- history of placement changes ----------------------------------------------------------
    def record_history(self, name: str, record: dict) -> dict:
        self._get(self.apps, name, "application")
        self.writes += 1
        for change in record["changes"]:
            row = {k: copy.deepcopy(v) for k, v in record.items() if k not in ("changes", "fencing")}
            row.update(
                id=len(self.history_rows) + 1,
                application=name,
                service=change["service"],
                by="admin" if record.get("fencing") is None else "controller",
                duration=round(max(0.0, record["ended"] - record["started"]), 3),
                **{"from": sorted(change["from"]), "to": sorted(change["to"])},
            )
            self.history_rows.append(row)
        return {"recorded": len(record["changes"])}

    def history(self, name: str, limit: int = 50, before: int | None = None) -> dict:
        self._get(self.apps, name, "application")
        rows = [
            r
            for r in reversed(self.history_rows)
            if r["application"] == name and (before is None or r["id"] < before)
        ]
        page = copy.deepcopy(rows[:limit])
        return {"history": page, "next": page[-1]["id"] if len(rows) > limit else None}

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
            changes = {k: stored.get(k) for k in placement} != placement
            if old == token and changes and not _ends_binding(stored, placement):
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
        self._touch("placement", app)
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
        # as the real KB (kb/ops.py): an applied deploy's policy becomes the application's (the
        # module tests write as the deployer, the real KB's admin)
        record = intent.parse(dict(event, role="admin"))
        name = event.get("application")
        if record is not None and record["state"] == intent.APPLIED and name in self.apps:
            self.apps[name]["policy"] = record["policy"]
            self._touch("application", name)
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

    def inventory_page(self, limit: int = 200, after: str | None = None) -> dict:
        doc = self.inventory()
        clusters = sorted(
            (c for c in doc["clusters"] if after is None or c["name"] > after), key=lambda c: c["name"]
        )
        doc["clusters"] = clusters[:limit]
        doc["next"] = clusters[limit - 1]["name"] if len(clusters) > limit else None
        return doc

    def _entry(self, name: str) -> dict:
        """A registered cluster's inventory entry: the inventory document's, else one without reports."""
        for entry in self.inventory_doc["clusters"]:
            if entry["name"] == name:
                return dict(copy.deepcopy(entry), heartbeat=None, nodes_received=None)
        record = self.clusters[name]
        return {
            "name": name,
            "tier": record.get("tier"),
            "location": record.get("location") or name,
            "labels": copy.deepcopy(record.get("labels") or {}),
            "healthy": False,
            "heartbeat_age": None,
            "reachable": None,
            "error": None,
            "credentials_broken": False,
            "nodes": [],
            "capacity_baseline": None,
            "free": {"cpu": 0.0, "memory": 0.0, "ephemeral_storage": 0.0},
            "kube_version": None,
            "api_versions": [],
            "heartbeat": None,
            "nodes_received": None,
        }

    def summary(self) -> dict:
        tiers: dict[str, dict[str, int]] = {}
        unhealthy = []
        for name in sorted(self.clusters):
            entry = self._entry(name)
            counts = tiers.setdefault(entry["tier"], {"clusters": 0, "healthy": 0})
            counts["clusters"] += 1
            counts["healthy"] += int(bool(entry["healthy"]))
            if not entry["healthy"]:
                unhealthy.append(
                    {k: entry[k] for k in ("name", "tier", "heartbeat_age", "reachable", "error")}
                )
        return {
            "clusters": len(self.clusters),
            "healthy": sum(t["healthy"] for t in tiers.values()),
            "tiers": tiers,
            "unhealthy": unhealthy,
        }

    def changes(
        self,
        cursor: str | None = None,
        stale_after: float | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict:
        """The change feed over this KB's writes (it has no agent reports: clusters change only
        by registration); 410 for a cursor it did not give."""
        since = None
        if cursor is not None:
            instance, _sep, rev = cursor.partition(":")
            if instance != self.instance or not rev.isdigit() or int(rev) > self.rev:
                raise KBError(410, "cursor: not known to this KB instance; read without one")
            since = int(rev)

        def new(kind: str, name: str) -> bool:
            return since is None or self.stamps.get((kind, name), 0) > since

        if cursor is not None and (limit is not None or after is not None):
            raise KBError(422, "limit: pages are for a full read (without a cursor)")
        names = [n for n in sorted(self.clusters) if new("cluster", n) and (after is None or n > after)]
        following = names[limit - 1] if limit is not None and len(names) > limit else None
        names = names if limit is None else names[:limit]
        clusters = [self._entry(n) for n in names]
        first = after is None
        removed: dict[str, list[str]] = {"clusters": [], "applications": []}
        if since is not None:
            for (kind, name), rev in sorted(self.removals.items()):
                if rev > since:
                    removed[kind + "s"].append(name)
        return {
            "full": since is None,
            "now": time.time(),
            "heartbeat_timeout": 15.0,
            "stale_after": 3.0 if stale_after is None else stale_after,
            "clusters": clusters,
            "removed": removed,
            "workloads": [],
            "latencies": [],
            "placements": [
                copy.deepcopy(self.placements[a])
                for a in sorted(self.placements)
                if first and new("placement", a)
            ],
            "applications": [
                copy.deepcopy(self.apps[a]) for a in sorted(self.apps) if first and new("application", a)
            ],
            "stale": [
                {"name": c["name"], "heartbeat": None, "nodes_received": None, "reachable": None}
                for c in map(self._entry, sorted(self.clusters))
                if not c["healthy"]
            ],
            "cursor": f"{self.instance}:{self.rev}",
            "next": following,
        }


def _ends_binding(stored: dict, given: dict) -> bool:
    """The KB's rule (kb/ops.same_binding): a second write under one token completes its intent
    (current := desired) or retracts it (desired := current), nothing else."""
    desired, current = (
        given.get("desired", stored.get("desired")),
        given.get("current", stored.get("current")),
    )
    completes = desired == stored.get("desired") and current == stored.get("desired")
    retracts = current == stored.get("current") and desired == stored.get("current")
    return stored.get("desired") is not None and (completes or retracts)
