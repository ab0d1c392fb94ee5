"""One contract, two implementations: the in-memory KB that the module unit tests use
(tests/support/memory_kb.py) and a real KB (`qonnect kb serve` on SQLite and PostgreSQL) answer the same calls
with the same results and the same KBError statuses, so a unit test cannot pass against a KB
that behaves differently from the one users run."""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from support.memory_kb import MemoryKB

ROOT = Path(__file__).resolve().parents[3]


def spec(name: str, energy: float = 1.0) -> dict[str, Any]:
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "objective": {"energy": energy},
            "services": [
                {
                    "name": "web",
                    "manifests": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "metadata": {"name": "web"},
                            "spec": {
                                "selector": {"matchLabels": {"app": "web"}},
                                "template": {
                                    "metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                                },
                            },
                        }
                    ],
                }
            ],
        },
    }


@dataclass
class Impl:
    """The same KB seen as admin and as a controller (the memory KB plays both roles)."""

    name: str
    admin: Any
    controller: Any


@pytest.fixture(params=["memory", "real"])
def kb(request: pytest.FixtureRequest, live_kb) -> Impl:
    """The memory KB, or the session's real KB (live_kb: SQLite and PostgreSQL)."""
    if request.param == "memory":
        memory = MemoryKB()
        return Impl("memory", memory, memory)
    return Impl(live_kb.backend, live_kb.admin, live_kb.client("controller"))


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status_of(call, *args: Any) -> int:
    with pytest.raises(KBError) as info:
        call(*args)
    return info.value.status


def test_missing_records_are_404(kb: Impl):
    name = fresh("none")
    assert status_of(kb.admin.get_cluster, name) == 404
    assert status_of(kb.admin.delete_cluster, name) == 404
    assert status_of(kb.admin.update_cluster, name, {"labels": {"a": "b"}}) == 404
    assert status_of(kb.admin.get_application, name) == 404
    assert status_of(kb.admin.delete_application, name) == 404
    assert status_of(kb.admin.get_placement, name) == 404


def test_clusters_register_once(kb: Impl):
    name = fresh("edge")
    made = kb.admin.register_cluster({"name": name, "tier": "edge", "labels": {"zone": "a"}})
    assert made["name"] == name and made["tier"] == "edge" and made["labels"] == {"zone": "a"}
    assert status_of(kb.admin.register_cluster, {"name": name, "tier": "edge"}) == 409
    assert kb.admin.update_cluster(name, {"labels": {"zone": "b"}})["labels"] == {"zone": "b"}
    assert name in {c["name"] for c in kb.admin.list_clusters()}
    kb.admin.delete_cluster(name)
    assert status_of(kb.admin.get_cluster, name) == 404


def test_application_versions_grow_only_on_change(kb: Impl):
    name = fresh("app")
    first = kb.admin.put_application(name, spec(name))
    assert (first["version"], first["changed"]) == (1, True)
    same = kb.admin.put_application(name, copy.deepcopy(spec(name)))
    assert (same["version"], same["changed"]) == (1, False)
    other = kb.admin.put_application(name, spec(name, energy=0.5))
    assert (other["version"], other["changed"]) == (2, True)
    assert kb.admin.get_application(name)["application"]["objective"]["energy"] == 0.5


def test_history_and_rollback_answer_alike(kb: Impl):
    """Issue 34.5: history rows (newest first, paged) and rollbacks, as the deploy and
    application modules use them."""
    name = fresh("hist")
    kb.admin.put_application(name, spec(name))
    kb.admin.put_application(name, spec(name, energy=0.5))
    for version, dst in ((1, ["edge-1"]), (2, ["edge-2"])):
        body = {
            "version": version,
            "trigger": "deploy",
            "outcome": "succeeded",
            "started": 1.0,
            "ended": 3.5,
            "changes": [{"service": "web", "from": [], "to": dst}],
        }
        assert kb.admin.record_history(name, body) == {"recorded": 1}
    page = kb.admin.history(name, limit=1)
    row = page["history"][0]
    assert (row["version"], row["from"], row["to"], row["by"], row["duration"]) == (
        2,
        [],
        ["edge-2"],
        "admin",
        2.5,
    )
    assert page["next"] == row["id"]
    older = kb.admin.history(name, limit=1, before=page["next"])
    assert [r["version"] for r in older["history"]] == [1] and older["next"] is None
    assert status_of(kb.admin.history, fresh("none")) == 404
    assert [v["version"] for v in kb.admin.application_versions(name)] == [1, 2]
    assert status_of(kb.admin.roll_back, name, 1, 1, "why") == 409
    assert status_of(kb.admin.roll_back, name, 2, 2, "why") == 422
    done = kb.admin.roll_back(name, 2, 1, "why")
    assert (done["version"], done["changed"], done["rollback"]["restores"]) == (3, True, 1)
    assert kb.admin.application_versions(name)[-1]["rollback"]["failing"] == 2


def test_a_bad_spec_is_422_and_stores_nothing(kb: Impl):
    name = fresh("bad")
    bad = spec(name)
    bad["spec"]["objective"]["energy"] = 7
    assert status_of(kb.admin.put_application, name, bad) == 422
    assert status_of(kb.admin.get_application, name) == 404


def test_placements_are_fenced(kb: Impl):
    name = fresh("placed")
    kb.admin.put_application(name, spec(name))
    fence = kb.controller.get_fence()
    term = int(fence["term"]) + 1
    a = {"current": {"web": [{"cluster": "edge-1", "replicas": 1}]}}
    b = {"current": {"web": [{"cluster": "edge-2", "replicas": 1}]}}
    kb.controller.raise_fence({"term": term, "seq": 5})
    assert kb.controller.get_fence()["term"] == term
    assert kb.controller.put_placement(name, a, {"term": term, "seq": 5})["fencing"] == {
        "term": term,
        "seq": 5,
    }
    assert kb.controller.put_placement(name, a, {"term": term, "seq": 5})["current"] == a["current"]  # retry
    assert (
        status_of(kb.controller.put_placement, name, b, {"term": term, "seq": 5}) == 409
    )  # same token, new content
    assert (
        status_of(kb.controller.put_placement, name, b, {"term": term, "seq": 4}) == 409
    )  # older than stored
    assert (
        status_of(kb.controller.put_placement, name, b, {"term": term - 1, "seq": 99}) == 409
    )  # below the fence
    assert status_of(kb.controller.raise_fence, {"term": term - 1, "seq": 1}) == 409
    assert kb.controller.put_placement(name, b, {"term": term, "seq": 6})["current"] == b["current"]
    assert kb.admin.get_placement(name)["current"] == b["current"]


def test_one_token_writes_an_intent_then_completes_or_retracts_it(kb: Impl):
    """A controller's run writes its Binding as the desired placement before it touches a
    cluster, then, under the same token, either completes it (current := desired) or retracts it
    (desired := current); any other second write under that token is refused (issue 38)."""
    name = fresh("intent")
    kb.admin.put_application(name, spec(name))
    old = {"web": [{"cluster": "edge-1", "replicas": 1}]}
    new = {"web": [{"cluster": "edge-2", "replicas": 1}]}
    other = {"web": [{"cluster": "edge-3", "replicas": 1}]}
    term = int(kb.controller.get_fence()["term"]) + 1
    kb.controller.raise_fence({"term": term, "seq": 1})
    kb.controller.put_placement(name, {"desired": old, "current": old}, {"term": term, "seq": 1})
    t2, t3 = {"term": term, "seq": 2}, {"term": term, "seq": 3}
    kb.controller.put_placement(name, {"desired": new}, t2)  # the intent, before any cluster
    got = kb.admin.get_placement(name)
    assert (got["desired"], got["current"]) == (new, old)
    assert status_of(kb.controller.put_placement, name, {"desired": other}, t2) == 409  # a second intent
    assert status_of(kb.controller.put_placement, name, {"current": other}, t2) == 409  # not the intent
    done = kb.controller.put_placement(name, {"desired": new, "current": new}, t2)  # completed
    assert (done["desired"], done["current"]) == (new, new)
    assert kb.controller.put_placement(name, {"desired": new, "current": new}, t2)["current"] == new  # retry
    assert status_of(kb.controller.put_placement, name, {"desired": old}, t2) == 409  # no way back after it
    kb.controller.put_placement(name, {"desired": other}, t3)  # the next run's intent ...
    back = kb.controller.put_placement(name, {"desired": new}, t3)  # ... retracted: it failed
    assert (back["desired"], back["current"]) == (new, new)
    assert status_of(kb.controller.put_placement, name, {"desired": other, "current": other}, t3) == 409


def test_the_change_feed_names_what_changed(kb: Impl):
    name, app = fresh("feed"), fresh("feed")
    kb.admin.register_cluster({"name": name, "tier": "edge"})
    full = kb.controller.changes()
    assert full["full"] and not full["removed"]["clusters"]
    entry = {c["name"]: c for c in full["clusters"]}[name]
    assert (entry["tier"], entry["nodes"], entry["healthy"], entry["heartbeat"]) == ("edge", [], False, None)
    assert name in {s["name"] for s in full["stale"]}  # registered, never reported
    kb.admin.put_application(app, spec(app))
    kb.admin.delete_cluster(name)
    got = kb.controller.changes(full["cursor"])
    assert not got["full"]
    assert name in got["removed"]["clusters"] and name not in {c["name"] for c in got["clusters"]}
    assert app in {a["name"] for a in got["applications"]}
    assert status_of(kb.controller.changes, "unknown:1") == 410


def test_the_inventory_pages_and_summarises(kb: Impl):
    names = [fresh("page") for _i in range(3)]
    for name in names:
        kb.admin.register_cluster({"name": name, "tier": "fog"})
    seen, after = [], None
    while True:
        page = kb.controller.inventory_page(limit=2, after=after)
        assert len(page["clusters"]) <= 2 and "placements" in page
        seen += [c["name"] for c in page["clusters"]]
        after = page["next"]
        if after is None:
            break
    assert seen == [c["name"] for c in kb.controller.inventory()["clusters"]]
    summary = kb.controller.summary()
    assert set(names) <= {u["name"] for u in summary["unhealthy"]}
    assert summary["tiers"]["fog"]["clusters"] >= 3 and summary["clusters"] >= 3


def test_an_applied_deploys_policy_is_the_applications_however_many_events_follow(kb: Impl):
    """Issue 38: the user's placement policy lives on the application's record, written with the
    deploy's ``applied`` intent; 1,000 later events (more than the 500 an event scan reads) do
    not hide it, an ``applying`` or ``failed`` intent does not change it, and the change feed
    carries the record whose policy changed."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

    name = fresh("policy")
    kb.admin.put_application(name, spec(name))
    assert kb.admin.get_application(name).get("policy") is None  # none applied yet
    chosen = {"scorer": "borda", "hysteresis": 0.3, "exclude": ["edge-2"]}
    kb.admin.post_event(intent.event(name, intent.APPLIED, chosen, 1))
    cursor = kb.controller.changes()["cursor"]
    for i in range(1000):
        kb.admin.post_event({"type": "note", "reason": "x", "application": name, "message": f"event {i}"})
    kb.admin.post_event(intent.event(name, intent.APPLYING, {"scorer": "optimal"}, 2))
    kb.admin.post_event(intent.event(name, intent.FAILED, {"scorer": "optimal"}, 2))
    record = kb.admin.get_application(name)
    assert record["policy"] == {"scorer": "borda", "hysteresis": 0.3, "exclude": ["edge-2"]}

    def events() -> list[dict[str, Any]]:
        return kb.admin.list_events(application=name, limit=intent.LOOKBACK)

    assert intent.stored_policy(events()) == {}  # what the event scan alone finds now: nothing
    assert intent.recorded_policy(record, events) == record["policy"]
    assert {a["name"]: a for a in kb.admin.list_applications()}[name]["policy"] == record["policy"]
    kb.admin.post_event(intent.event(name, intent.APPLIED, {"scorer": "weighted", "exclude": []}, 2))
    fed = {a["name"]: a for a in kb.controller.changes(cursor)["applications"]}
    assert fed[name]["policy"] == {"scorer": "weighted", "exclude": []}


def test_only_an_admins_applied_deploy_sets_the_policy(live_kb):
    """The real KB knows who writes: an agent or the controller cannot change how the controller
    places an application (as the event scan trusted only admins' intents)."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners import intent

    name = fresh("policy-role")
    live_kb.admin.put_application(name, spec(name))
    live_kb.client("controller").post_event(intent.event(name, intent.APPLIED, {"scorer": "borda"}, 1))
    assert live_kb.admin.get_application(name).get("policy") is None
    live_kb.admin.post_event(intent.event(name, intent.APPLIED, {"scorer": "optimal"}, 1))
    assert live_kb.admin.get_application(name)["policy"] == {"scorer": "optimal"}
