"""The KB API against live servers, once on SQLite and once on PostgreSQL."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import free_capacity

pytestmark = pytest.mark.timeout(120)


def spec(name: str, energy: float = 1.0, image: str = "nginx:1") -> dict:
    """A QONNECT-format spec with its manifests inline."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
    }
    return {
        "apiVersion": "swarmchestrate.tu-berlin.de/v1",
        "kind": "Application",
        "metadata": {"name": name, "qos": {"energy": energy, "pricing": 0, "performance": 0}},
        "spec": {"cloud_svc": [deployment]},
    }


def node(name: str, cpu: float = 6.0, ready: bool = True) -> dict:
    return {
        "name": name,
        "ready": ready,
        "schedulable": True,
        "pressure": {"memory": False, "disk": False, "pid": False},
        "allocatable": {"cpu": cpu, "memory": 7160000000, "ephemeral_storage": 10**11},
        "requested": {"cpu": 0.5, "memory": 268435456, "ephemeral_storage": 0},
        "labels": {"kubernetes.io/hostname": name},
        "bandwidth_gbps": 52.5,
        "energy_kwh": 0.0024042,
        "price_eur_h": 16.3884,
    }


def raw(
    kb, method: str, path: str, body: bytes | None, token: str | None, headers: dict | None = None
) -> tuple[int, dict]:
    """A request with exactly these bytes (for malformed bodies the client would not send)."""
    parsed = urllib.parse.urlsplit(kb.url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=hdrs)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else {}


def test_health_is_open_and_the_api_needs_a_valid_token(live_kb):
    assert KBClient(live_kb.url, None).healthz()["database"] == live_kb.backend
    for token in (None, "qkb_not-a-real-token"):
        with pytest.raises(KBError) as err:
            KBClient(live_kb.url, token).list_clusters()
        assert err.value.status == 401
        assert "token" in err.value.message
    status, body = raw(
        live_kb, "GET", "/api/v1/clusters", None, None, {"Authorization": "Basic dXNlcjpwdw=="}
    )
    assert status == 401 and "detail" in body


def test_cluster_register_update_deregister(live_kb, fresh):
    name = fresh("cloud")
    admin = live_kb.admin
    made = admin.register_cluster(
        {
            "name": name,
            "tier": "cloud",
            "server": "https://k:6443",
            "kubeconfig": "/etc/k/a.yaml",
            "labels": {"region": "eu"},
        }
    )
    assert made["location"] == name and made["kubeconfig"] == "/etc/k/a.yaml"
    assert made["status"] == {
        "seq": None,
        "heartbeat_age": None,
        "healthy": False,
        "reachable": None,
        "error": None,
    }
    with pytest.raises(KBError) as err:
        admin.register_cluster({"name": name, "tier": "fog"})
    assert err.value.status == 409 and "name" in err.value.message
    changed = admin.update_cluster(name, {"location": "eu-west", "context": "ctx"})
    assert (changed["location"], changed["context"], changed["tier"]) == ("eu-west", "ctx", "cloud")
    assert changed["labels"] == {"region": "eu"}
    replaced = admin.request("PUT", f"/api/v1/clusters/{name}", {"tier": "edge"})
    assert replaced["tier"] == "edge" and replaced["kubeconfig"] is None
    assert name in [c["name"] for c in admin.list_clusters()]
    admin.delete_cluster(name)
    for call in (
        lambda: admin.get_cluster(name),
        lambda: admin.delete_cluster(name),
        lambda: admin.update_cluster(name, {"tier": "fog"}),
    ):
        with pytest.raises(KBError) as err:
            call()
        assert err.value.status == 404 and name in err.value.message


def test_put_creates_with_201_and_checks_the_name(live_kb, fresh):
    name = fresh("fog")
    status, body = raw(
        live_kb, "PUT", f"/api/v1/clusters/{name}", json.dumps({"tier": "fog"}).encode(), live_kb.admin_token
    )
    assert status == 201 and body["name"] == name
    status, body = raw(
        live_kb,
        "PUT",
        f"/api/v1/clusters/{name}",
        json.dumps({"tier": "fog", "name": "other"}).encode(),
        live_kb.admin_token,
    )
    assert status == 422 and body["detail"].startswith("name:")


def test_readers_and_agents_never_see_credentials(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster(
        {"name": name, "tier": "edge", "kubeconfig": "/secret/kc", "context": "c1"}
    )
    for who in (live_kb.client("reader"), live_kb.client("agent", name)):
        for record in (who.get_cluster(name), *who.list_clusters()):
            assert "kubeconfig" not in record and "context" not in record
        assert "/secret/kc" not in json.dumps(who.inventory())
    assert live_kb.client("controller").get_cluster(name)["kubeconfig"] == "/secret/kc"
    with pytest.raises(KBError) as err:
        live_kb.client("reader").register_cluster({"name": fresh("x"), "tier": "fog"})
    assert err.value.status == 403 and "reader" in err.value.message


def test_an_agent_writes_only_its_own_cluster(live_kb, fresh):
    mine, other = fresh("edge"), fresh("edge")
    for name in (mine, other):
        live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    agent = live_kb.client("agent", mine)
    assert agent.report(mine, {"seq": 1, "ts": time.time()}) == {"seq": 1, "applied": True}
    with pytest.raises(KBError) as err:
        agent.report(other, {"seq": 1, "ts": time.time()})
    assert err.value.status == 403 and mine in err.value.message
    assert live_kb.admin.get_cluster(other)["status"]["seq"] is None
    for role in ("reader", "controller"):
        with pytest.raises(KBError) as err:
            live_kb.client(role).report(mine, {"seq": 2, "ts": time.time()})
        assert err.value.status == 403
    with pytest.raises(KBError) as err:
        live_kb.admin.report(fresh("nope"), {"seq": 1, "ts": time.time()})
    assert err.value.status == 404


def test_reports_merge_by_seq_into_the_inventory(live_kb, fresh):
    a, b = fresh("cloud"), fresh("edge")
    economics = {"bandwidth_gbps": 52.5, "energy_kwh": 0.0024042, "price_eur_h": 16.3884}
    live_kb.admin.register_cluster(  # the node economics are the registration's (the reports' match)
        {"name": a, "tier": "cloud", "location": "loc-a", "labels": {"region": "eu"}, "economics": economics}
    )
    live_kb.admin.register_cluster({"name": b, "tier": "edge", "location": "loc-b"})
    agent = live_kb.client("agent", a)
    now = time.time()
    agent.report(
        a, {"seq": 10, "ts": now, "nodes": [node("n1"), node("n2")], "latencies": {"kb": 0.8, b: 24.9}}
    )
    # an older report arrives late: nothing it says replaces newer state
    late = agent.report(
        a, {"seq": 5, "ts": now - 5, "nodes": [node("old")], "latencies": {b: 99.0}, "reachable": False}
    )
    assert late == {"seq": 5, "applied": False}
    # a newer report that omits n2 removes it; null workloads keep the section
    agent.report(a, {"seq": 11, "ts": now, "nodes": [node("n1", cpu=8.0)], "workloads": None})
    inv = live_kb.admin.inventory()
    cluster = next(c for c in inv["clusters"] if c["name"] == a)
    assert set(cluster) == {
        "name", "tier", "location", "labels", "healthy", "heartbeat_age", "nodes", "free",
        "reachable", "error", "credentials_broken", "capacity_baseline", "kube_version", "api_versions",
    }  # fmt: skip
    assert cluster["healthy"] is True and 0 <= cluster["heartbeat_age"] < 2
    assert cluster["free"] == free_capacity(cluster)  # the one definition of free capacity
    assert [n["name"] for n in cluster["nodes"]] == ["n1"]
    n1 = cluster["nodes"][0]
    assert n1["allocatable"] == {"cpu": 8.0, "memory": 7160000000, "ephemeral_storage": 10**11}
    assert isinstance(n1["allocatable"]["memory"], int)
    assert n1["pressure"] == {"memory": False, "disk": False, "pid": False}
    assert n1["energy_kwh"] == 0.0024042 and n1["labels"] == {"kubernetes.io/hostname": "n1"}
    assert inv["latency_ms"]["loc-a"] == {"kb": 0.8, "loc-b": 24.9}
    assert live_kb.admin.latency()["loc-a"]["loc-b"] == 24.9
    assert [n["name"] for n in live_kb.admin.list_nodes(a)] == ["n1"]
    # an unreachable cluster API: nodes not observed (null) stay, the cluster is unhealthy
    agent.report(a, {"seq": 12, "ts": now, "reachable": False, "error": "connection refused", "nodes": None})
    status = live_kb.admin.get_cluster(a)["status"]
    assert (status["seq"], status["healthy"], status["reachable"]) == (12, False, False)
    assert status["error"] == "connection refused"
    assert [n["name"] for n in live_kb.admin.list_nodes(a)] == ["n1"]
    never = next(c for c in live_kb.admin.inventory()["clusters"] if c["name"] == b)
    assert never["healthy"] is False and never["heartbeat_age"] is None and never["nodes"] == []
    # what the API server says of itself: the newest report that carried it (issue 34)
    assert (cluster["kube_version"], cluster["api_versions"]) == (None, [])
    agent.report(
        a, {"seq": 14, "ts": now, "server": {"kube_version": "v1.34.4", "api_versions": ["v1", "apps/v1"]}}
    )
    agent.report(a, {"seq": 13, "ts": now, "server": {"kube_version": "v1.20.0", "api_versions": ["v1"]}})
    agent.report(a, {"seq": 15, "ts": now})
    served = next(c for c in live_kb.admin.inventory()["clusters"] if c["name"] == a)
    assert (served["kube_version"], served["api_versions"]) == ("v1.34.4", ["apps/v1", "v1"])


def test_a_silent_cluster_becomes_unhealthy_after_the_heartbeat_timeout(live_kb, fresh):
    name = fresh("fog")
    live_kb.admin.register_cluster({"name": name, "tier": "fog"})
    live_kb.admin.report(name, {"seq": 1, "ts": time.time(), "nodes": [node("w")]})
    assert live_kb.admin.get_cluster(name)["status"]["healthy"] is True
    time.sleep(2.3)  # the live KB runs with --heartbeat-timeout 2
    status = live_kb.admin.get_cluster(name)["status"]
    assert status["healthy"] is False and status["heartbeat_age"] >= 2.3
    inv = next(c for c in live_kb.admin.inventory()["clusters"] if c["name"] == name)
    assert inv["healthy"] is False and inv["nodes"][0]["heartbeat_age"] >= 2.3


def test_workloads_are_listed_per_application_and_cluster(live_kb, fresh):
    name, app = fresh("cloud"), fresh("app")
    live_kb.admin.register_cluster({"name": name, "tier": "cloud"})
    workload = {
        "namespace": app,
        "kind": "Deployment",
        "name": "web",
        "application": app,
        "service": "web",
        "status": "Failed",
        "reason": "ImagePullBackOff",
        "replicas": 2,
        "ready_replicas": 0,
        "since": 1.0,
    }
    live_kb.admin.report(name, {"seq": 1, "ts": 1.0, "workloads": [workload]})
    assert live_kb.admin.list_workloads(application=app) == [{"cluster": name, **workload}]
    assert live_kb.admin.list_workloads(cluster=name)[0]["status"] == "Failed"
    live_kb.admin.report(name, {"seq": 2, "ts": 2.0, "workloads": []})
    assert live_kb.admin.list_workloads(application=app) == []


def test_applications_are_validated_and_versioned(live_kb, fresh):
    name = fresh("shop")
    admin = live_kb.admin
    first = admin.put_application(name, spec(name))
    assert (first["version"], first["changed"]) == (1, True)
    assert first["application"]["name"] == name
    assert first["application"]["objective"]["energy"] == 1.0
    again = admin.put_application(name, spec(name))
    assert (again["version"], again["changed"]) == (1, False)
    second = admin.put_application(name, spec(name, image="nginx:2"))
    assert (second["version"], second["changed"]) == (2, True)
    versions = admin.application_versions(name)
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[0]["spec"] == spec(name)
    one = admin.request("GET", f"/api/v1/applications/{name}/versions/1")
    assert (
        one["application"]["services"][0]["manifests"][0]["spec"]["template"]["spec"]["containers"][0][
            "image"
        ]
        == "nginx:1"
    )
    assert admin.get_application(name)["version"] == 2
    assert name in [a["name"] for a in admin.list_applications()]
    with pytest.raises(KBError) as err:
        live_kb.client("controller").put_application(name, spec(name))
    assert err.value.status == 403
    admin.delete_application(name)
    with pytest.raises(KBError) as err:
        admin.get_application(name)
    assert err.value.status == 404


def test_invalid_specs_get_422_with_every_error(live_kb, fresh):
    name = fresh("bad")
    broken = spec(name, energy=3)
    broken["metadata"]["qos"]["speed"] = 1
    status, body = raw(
        live_kb, "PUT", f"/api/v1/applications/{name}", json.dumps(broken).encode(), live_kb.admin_token
    )
    assert status == 422
    fields = {e["field"] for e in body["errors"]}
    assert {"metadata.qos.energy", "metadata.qos.speed"} <= fields
    with pytest.raises(KBError) as err:
        live_kb.admin.put_application(name, spec("other-name"))
    assert err.value.status == 422 and "metadata.name" in err.value.message
    with_file = spec(name)
    with_file["spec"]["cloud_svc"] = [{"file": "/etc/passwd"}]
    with pytest.raises(KBError) as err:
        live_kb.admin.put_application(name, with_file)
    assert err.value.status == 422 and "spec.cloud_svc[0]" in err.value.message
    with pytest.raises(KBError) as err:
        live_kb.admin.get_application(name)
    assert err.value.status == 404


def test_placements_are_fenced(live_kb, fresh):
    app = fresh("app")
    live_kb.admin.put_application(app, spec(app))
    ctl = live_kb.client("controller")
    desired = {"cloud-svc": [{"cluster": "cloud-1", "replicas": 1, "nodes": ["w1"]}]}
    with pytest.raises(KBError) as err:
        ctl.put_placement(app, {"desired": desired})
    assert err.value.status == 403 and "fencing" in err.value.message
    got = ctl.put_placement(app, {"desired": desired}, {"term": 2, "seq": 7})
    assert got["desired"] == desired and got["current"] is None
    assert got["fencing"] == {"term": 2, "seq": 7}
    for stale in ({"term": 1, "seq": 99}, {"term": 2, "seq": 6}):
        with pytest.raises(KBError) as err:
            ctl.put_placement(app, {"current": desired}, stale)
        assert err.value.status == 409 and "fencing" in err.value.message
    assert ctl.get_placement(app)["current"] is None
    ctl.put_placement(app, {"desired": desired}, {"term": 2, "seq": 7})  # the same write again
    elsewhere = {"cloud-svc": [{"cluster": "cloud-2", "replicas": 1}]}
    with pytest.raises(KBError) as err:  # the same token for another write: a second writer
        ctl.put_placement(app, {"desired": elsewhere}, {"term": 2, "seq": 7})
    assert err.value.status == 409 and "already used" in err.value.message
    ctl.put_placement(app, {"current": desired}, {"term": 2, "seq": 8})
    ctl.put_placement(app, {"desired": {}}, {"term": 3, "seq": 0})
    placed = live_kb.admin.put_placement(app, {"current": desired})  # admin: no fencing needed
    assert placed["fencing"] == {"term": 3, "seq": 0} and placed["desired"] == {}
    assert live_kb.admin.inventory()["placements"][app] == desired
    assert app in [p["application"] for p in ctl.request("GET", "/api/v1/placements")["placements"]]
    with pytest.raises(KBError) as err:
        live_kb.client("reader").put_placement(app, {"current": {}}, {"term": 9, "seq": 9})
    assert err.value.status == 403
    with pytest.raises(KBError) as err:
        ctl.put_placement(fresh("ghost"), {"current": {}}, {"term": 9, "seq": 9})
    assert err.value.status == 404


def test_events_are_recorded_and_filtered(live_kb, fresh):
    app, cluster = fresh("app"), fresh("edge")
    ctl = live_kb.client("controller")
    first = ctl.post_event(
        {"type": "deploy", "reason": "Placed", "message": "on edge", "application": app, "cluster": cluster}
    )
    assert first["id"] > 0 and first["ts"] > 0
    live_kb.admin.put_application(app, spec(app))  # an agent's events name only applications
    live_kb.admin.put_placement(app, {"desired": {"cloud-svc": [{"cluster": cluster, "replicas": 1}]}})
    agent = live_kb.client("agent", cluster)  # placed on its cluster (issue 34.7)
    second = agent.post_event({"type": "failure", "reason": "Unreachable", "application": app})
    assert second["cluster"] == cluster and second["id"] > first["id"]
    with pytest.raises(KBError) as err:
        agent.post_event({"type": "failure", "cluster": fresh("other")})
    assert err.value.status == 403
    with pytest.raises(KBError) as err:
        live_kb.client("reader").post_event({"type": "deploy"})
    assert err.value.status == 403
    mine = ctl.list_events(application=app)
    assert [e["id"] for e in mine] == [first["id"], second["id"]]
    assert mine[0] == first
    assert [e["id"] for e in ctl.list_events(application=app, after_id=first["id"])] == [second["id"]]
    assert ctl.list_events(application=app, since=second["ts"]) == []
    assert [e["id"] for e in ctl.list_events(cluster=cluster, limit=1)] == [second["id"]]
    assert ctl.list_events(limit=1)[0]["id"] >= second["id"]


def test_bad_input_is_4xx_naming_the_field(live_kb, fresh):
    name = fresh("cloud")
    live_kb.admin.register_cluster({"name": name, "tier": "cloud"})
    tok = live_kb.admin_token
    path = f"/api/v1/clusters/{name}/reports"
    cases = [
        (b'{"seq": 1, "ts": ', "malformed JSON"),
        (b'{"seq": 1, "ts": 1, "colour": "red"}', "colour"),
        (b'{"seq": "one", "ts": 1}', "seq"),
        (b'{"seq": -1, "ts": 1}', "seq"),
        (b'{"seq": 99999999999999999999999, "ts": 1}', "seq"),
        (b'{"seq": 1, "ts": NaN}', "ts"),
        (b'{"seq": 1, "ts": 1, "nodes": [{"name": "a", "ready": "maybe"}]}', "nodes.0.ready"),
        (b'{"seq": 1, "ts": 1, "error": "nul\\u0000"}', "error"),
        (
            b'{"seq": 1, "ts": 1, "nodes": [{"name": "a", "ready": true}, {"name": "a", "ready": true}]}',
            "nodes",
        ),
        (b"[1, 2]", "body"),
    ]
    for body, field in cases:
        status, answer = raw(live_kb, "POST", path, body, tok)
        assert status == 422, (body, answer)
        assert field in answer["detail"], (body, answer)
    status, answer = raw(live_kb, "POST", path, b'{"seq": 1, "ts": 1, "error": "' + b"x" * 70000 + b'"}', tok)
    assert status == 413 and "limit" in answer["detail"]
    status, answer = raw(
        live_kb, "POST", path, b'{"seq": 1, "nodes": ' + b"[" * 20000 + b"]" * 20000 + b"}", tok
    )
    assert status == 400 and answer["detail"].startswith("body:")
    status, answer = raw(
        live_kb, "POST", "/api/v1/clusters", json.dumps({"name": "Not_A_Label", "tier": "moon"}).encode(), tok
    )
    assert status == 422 and "name" in answer["detail"] and "tier" in answer["detail"]
    status, answer = raw(live_kb, "GET", "/api/v1/events?limit=0&since=-1", None, tok)
    assert status == 422 and "limit" in answer["detail"] and "since" in answer["detail"]
    status, answer = raw(live_kb, "GET", "/api/v1/clusters/UPPER", None, tok)
    assert status == 422 and "name" in answer["detail"]


def test_tokens_through_the_api(live_kb, fresh):
    cluster = fresh("edge")
    made = live_kb.admin.request(
        "POST", "/api/v1/tokens", {"role": "agent", "cluster": cluster, "name": "edge-agent"}
    )
    assert made["token"].startswith("qkb_") and made["name"] == "edge-agent"
    who = KBClient(live_kb.url, made["token"]).request("GET", "/api/v1/whoami")
    assert who == {"name": "edge-agent", "role": "agent", "cluster": cluster}
    with pytest.raises(KBError) as err:
        live_kb.admin.request("POST", "/api/v1/tokens", {"role": "agent"})
    assert err.value.status == 422 and "cluster" in err.value.message
    with pytest.raises(KBError) as err:
        live_kb.client("controller").request("POST", "/api/v1/tokens", {"role": "admin"})
    assert err.value.status == 403


def test_the_client_reports_an_unreachable_kb_without_leaking_the_token():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = KBClient(f"http://127.0.0.1:{port}", "qkb_secret-value", timeout=2)
    with pytest.raises(KBError) as err:
        client.list_clusters()
    assert err.value.status == 0
    assert "secret-value" not in str(err.value) and "secret-value" not in repr(client)


def test_a_failing_version_rolls_back_to_a_stored_one_only(live_kb, fresh):
    """Issue 22.4: the controller restores the spec of an older version as the newest one, fenced,
    only while the failing version is current, and only a version a user stored."""
    name = fresh("roll")
    admin, ctl = live_kb.admin, live_kb.client("controller")
    admin.put_application(name, spec(name, image="nginx:1"))
    admin.put_application(name, spec(name, image="crash:2"))
    term = int(ctl.get_fence()["term"]) + 1  # placement tests above use their own low terms
    fence = ctl.raise_fence({"term": term, "seq": 0})
    token = {"term": fence["term"], "seq": fence["seq"]}
    for who, fencing, status in (
        (live_kb.client("reader"), token, 403),
        (live_kb.client("agent", "edge-1"), token, 403),
        (ctl, None, 403),  # a controller must send its fencing token
        (ctl, {"term": term - 1, "seq": 5}, 409),  # a deposed leader's token
    ):
        with pytest.raises(KBError) as err:
            who.roll_back(name, 2, 1, "crash-looping on edge-1, edge-2", fencing)
        assert err.value.status == status, err.value.message
    for failing, restores, status in ((1, 1, 409), (2, 2, 422), (2, 3, 422), (2, 0, 422)):
        with pytest.raises(KBError) as err:
            ctl.roll_back(name, failing, restores, "why", token)
        assert err.value.status == status, err.value.message
    assert admin.get_application(name)["version"] == 2  # nothing changed so far
    done = ctl.roll_back(name, 2, 1, "crash-looping on edge-1, edge-2", token)
    assert (done["version"], done["changed"]) == (3, True)
    assert done["rollback"] == {
        "failing": 2,
        "restores": 1,
        "by": "controller",
        "reason": "crash-looping on edge-1, edge-2",
    }
    versions = admin.application_versions(name)
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[2]["spec"] == versions[0]["spec"] == spec(name, image="nginx:1")
    assert versions[2]["rollback"]["failing"] == 2 and versions[0]["rollback"] is None
    assert admin.get_application(name)["version"] == 3
    with pytest.raises(KBError) as err:  # the same rollback again (a new leader): changes nothing
        ctl.roll_back(name, 2, 1, "again", token)
    assert err.value.status == 409 and "version 3, not 2" in err.value.message
    with pytest.raises(KBError) as err:
        ctl.roll_back(fresh("ghost"), 2, 1, "why", token)
    assert err.value.status == 404
