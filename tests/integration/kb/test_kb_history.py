"""Issue 34.5: the KB's history of placement changes and the status of each stored version, on
SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

pytestmark = pytest.mark.timeout(120)


def spec(name: str, image: str = "nginx:1") -> dict:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
    }
    return {
        "apiVersion": "swarmchestrate.tu-berlin.de/v1",
        "kind": "Application",
        "metadata": {"name": name, "qos": {"energy": 1.0, "pricing": 0, "performance": 0}},
        "spec": {"cloud_svc": [deployment]},
    }


def change(service: str, src: list[str], dst: list[str]) -> dict:
    return {"service": service, "from": src, "to": dst}


def test_history_rows_are_newest_first_paged_and_mark_versions(live_kb, fresh):
    name = fresh("hist")
    admin = live_kb.admin
    admin.put_application(name, spec(name, image="nginx:1"))
    admin.put_application(name, spec(name, image="broken:2"))
    assert [v["status"]["state"] for v in admin.application_versions(name)] == ["pending", "pending"]
    admin.record_history(
        name,
        {
            "version": 1,
            "trigger": "deploy",
            "outcome": "succeeded",
            "started": 100.0,
            "ended": 112.5,
            "changes": [change("web", [], ["edge-1"])],
        },
    )
    admin.record_history(
        name,
        {
            "version": 2,
            "trigger": "deploy",
            "outcome": "failed",
            "detail": "Deployment/web: ImagePullBackOff",
            "started": 200.0,
            "ended": 230.0,
            "changes": [change("web", ["edge-1"], ["edge-1"])],
            "failed_on": ["edge-1"],
        },
    )
    page = admin.history(name)
    assert [(r["version"], r["outcome"]) for r in page["history"]] == [(2, "failed"), (1, "succeeded")]
    first = page["history"][1]
    assert (first["from"], first["to"], first["trigger"], first["by"], first["duration"]) == (
        [],
        ["edge-1"],
        "deploy",
        "admin",
        12.5,
    )
    assert page["next"] is None
    one = admin.history(name, limit=1)
    assert len(one["history"]) == 1 and one["next"] == one["history"][0]["id"]
    rest = admin.history(name, limit=1, before=one["next"])
    assert [r["version"] for r in rest["history"]] == [1] and rest["next"] is None
    status = {v["version"]: v["status"] for v in admin.application_versions(name)}
    assert (status[1]["state"], status[1]["ready"]) == ("ready", ["edge-1"])
    assert (status[2]["state"], status[2]["failed"], status[2]["ready"]) == ("failed", ["edge-1"], [])
    # any role reads it; only admin and (fenced) controllers write it
    assert live_kb.client("reader").history(name)["history"][0]["version"] == 2
    body = {
        "version": 2,
        "trigger": "cluster-down",
        "outcome": "succeeded",
        "started": 1.0,
        "ended": 2.0,
        "changes": [change("web", ["edge-1"], ["edge-2"])],
    }
    for who, status_code in ((live_kb.client("reader"), 403), (live_kb.client("controller"), 403)):
        with pytest.raises(KBError) as err:
            who.record_history(name, body)
        assert err.value.status == status_code, err.value.message
    with pytest.raises(KBError) as err:
        admin.record_history(fresh("ghost"), body)
    assert err.value.status == 404
    with pytest.raises(KBError) as err:
        admin.history(fresh("ghost"))
    assert err.value.status == 404
    with pytest.raises(KBError) as err:  # from/to must be cluster names, the outcome a known one
        admin.record_history(name, dict(body, outcome="maybe"))
    assert err.value.status == 422


def test_controller_history_is_fenced_and_superseded_marks_nothing(live_kb, fresh):
    name = fresh("hctl")
    admin, ctl = live_kb.admin, live_kb.client("controller")
    admin.put_application(name, spec(name))
    term = int(ctl.get_fence()["term"]) + 1
    fence = ctl.raise_fence({"term": term, "seq": 0})
    token = {"term": fence["term"], "seq": fence["seq"]}
    body = {
        "version": 1,
        "trigger": "spec-changed",
        "decision": "d-7",
        "outcome": "superseded",
        "detail": "superseded by version 2",
        "started": 10.0,
        "ended": 11.0,
        "changes": [change("web", ["edge-1"], ["edge-2"])],
    }
    with pytest.raises(KBError) as err:
        ctl.record_history(name, dict(body, fencing={"term": term - 1, "seq": 9}))
    assert err.value.status == 409
    assert ctl.record_history(name, dict(body, fencing=token)) == {"recorded": 1}
    row = admin.history(name)["history"][0]
    assert (row["by"], row["decision"], row["outcome"], row["from"], row["to"]) == (
        "controller",
        "d-7",
        "superseded",
        ["edge-1"],
        ["edge-2"],
    )
    assert admin.application_versions(name)[0]["status"]["state"] == "pending"


def test_event_data_is_stored_and_served(live_kb, fresh):
    name = fresh("evd")
    posted = live_kb.admin.post_event(
        {"type": "deploy.intent", "application": name, "message": "prose", "data": {"state": "applying"}}
    )
    assert posted["data"] == {"state": "applying"}
    got = live_kb.admin.list_events(application=name)
    assert got[-1]["data"] == {"state": "applying"} and got[-1]["message"] == "prose"
    with pytest.raises(KBError) as err:
        live_kb.admin.post_event({"type": "x", "data": {"big": "x" * 9000}})
    assert err.value.status == 422


def test_a_controller_run_overtaken_by_a_users_deploy_is_superseded(live_kb, fresh):
    """Issue 34.4: the controller's run for version 2 ends after the user stored version 3: its
    outcome is "superseded by version 3", recorded with from -> to, and version 2 is not ready."""
    from qonnect.controller import moves

    name = fresh("sup")
    admin, ctl = live_kb.admin, live_kb.client("controller")
    admin.put_application(name, spec(name, image="nginx:1"))
    admin.put_application(name, spec(name, image="nginx:2"))
    admin.put_placement(
        name, {"desired": {"web": [{"cluster": "edge-2"}]}, "current": {"web": [{"cluster": "edge-2"}]}}
    )
    term = int(ctl.get_fence()["term"]) + 1
    token = {"term": term, "seq": 0}
    ctl.raise_fence(token)
    decision = {"id": "d-34", "app": name, "kind": "spec-changed", "spec_version": 2}
    assert moves.superseding_version(ctl, decision) is None  # version 2 is still current
    admin.put_application(name, spec(name, image="nginx:3"))  # the user's fix
    assert moves.superseding_version(ctl, decision) == 3
    moves.record(
        ctl,
        decision,
        token,
        moves.SUPERSEDED,
        "superseded by version 3",
        {"web": [{"cluster": "edge-1"}]},
        5.0,
    )
    row = admin.history(name)["history"][0]
    assert (row["version"], row["trigger"], row["decision"], row["outcome"]) == (
        2,
        "spec-changed",
        "d-34",
        "superseded",
    )
    assert (row["from"], row["to"], row["by"]) == (["edge-1"], ["edge-2"], "controller")
    status = {v["version"]: v["status"]["state"] for v in admin.application_versions(name)}
    assert status[2] == "pending"
    # a cluster-down move that succeeded: only the moved service, and the version is ready there
    moves.record(
        ctl,
        {"id": "d-35", "app": name, "kind": "cluster-down", "spec_version": 3},
        token,
        "succeeded",
        "playbook succeeded",
        {"web": [{"cluster": "edge-1"}]},
        5.0,
    )
    row = admin.history(name)["history"][0]
    assert (row["trigger"], row["from"], row["to"], row["outcome"]) == (
        "cluster-down",
        ["edge-1"],
        ["edge-2"],
        "succeeded",
    )
    ready = {v["version"]: v["status"] for v in admin.application_versions(name)}[3]
    assert (ready["state"], ready["ready"]) == ("ready", ["edge-2"])
