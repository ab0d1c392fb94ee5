"""Issue 34.7 against live KBs (SQLite and PostgreSQL): Secret manifests in a stored spec reach
only admin and controller tokens whole; other roles read each Secret's name, keys and a digest
of each value, in every route that returns a spec. An agent's events name only applications
placed on its own cluster."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from qonnect.cli import main

pytestmark = pytest.mark.timeout(120)

PASSWORD = "hunter2-very-secret"
TOKEN_B64 = "c3VwZXItc2VjcmV0LXRva2Vu"  # base64 of a value: data is what the manifest gives


def secret(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": {"password": PASSWORD},
        "data": {"token": TOKEN_B64},
    }


def deployment(name: str, image: str = "nginx:1") -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"name": name, "image": image}]}}},
    }


def spec(name: str, image: str = "nginx:1") -> dict:
    """QONNECT's format: a bundle as a list of manifests and one as YAML text, each with a Secret."""
    text = yaml.safe_dump_all([deployment("db", image), secret("db-credentials")])
    return {
        "apiVersion": "swarmchestrate.tu-berlin.de/v1",
        "kind": "Application",
        "metadata": {"name": name, "qos": {"energy": 1, "pricing": 0, "performance": 0}},
        "spec": {"cloud_svc": [deployment("web", image), secret("web-credentials")], "fog_svc": text},
    }


def unkeyed(value: str) -> str:
    """The plain SHA-256 a reader could compute from a guess (must never be answered)."""
    return hashlib.sha256(value.encode()).hexdigest()


def assert_redacted(doc: object) -> None:
    """No Secret value anywhere in the answer, nor its unkeyed hash; keyed digests are there."""
    text = json.dumps(doc)
    assert PASSWORD not in text and TOKEN_B64 not in text
    assert unkeyed(PASSWORD) not in text and unkeyed(TOKEN_B64) not in text
    assert "hmac-sha256:" in text


def secrets_in(record: dict) -> list[dict]:
    """The Secrets of a record's spec (the list bundle and the parsed YAML text) and its
    normalized application."""
    found = [m for m in record["spec"]["spec"]["cloud_svc"] if m["kind"] == "Secret"]
    found += [d for d in yaml.safe_load_all(record["spec"]["spec"]["fog_svc"]) if d["kind"] == "Secret"]
    for svc in record["application"]["services"]:
        found += [m for m in svc["manifests"] if m["kind"] == "Secret"]
    return found


def test_readers_get_names_keys_and_digests_of_secrets(live_kb, fresh):
    name = fresh("vault")
    admin = live_kb.admin
    admin.put_application(name, spec(name))
    admin.put_application(name, spec(name, image="nginx:2"))  # a second version
    for role, cluster in (("reader", None), ("agent", "edge-1")):
        kb = live_kb.client(role, cluster)
        answers = [
            kb.get_application(name),
            kb.request("GET", "/api/v1/applications"),
            kb.application_versions(name),
            kb.request("GET", f"/api/v1/applications/{name}/versions/1"),
            kb.changes(),
        ]
        for answer in answers:
            assert_redacted(answer)
        record = kb.get_application(name)
        found = secrets_in(record)
        assert len(found) == 4  # two Secrets, each in the spec and in the normalized application
        # one digest per value, the same in every Secret and every answer (a change shows), and
        # different values have different digests
        passwords = {s["stringData"]["password"] for s in found}
        tokens = {s["data"]["token"] for s in found}
        assert len(passwords) == 1 and len(tokens) == 1 and passwords != tokens, (passwords, tokens)
        for s in found:
            assert s["metadata"]["name"] in ("web-credentials", "db-credentials")
            assert set(s["stringData"]) == {"password"} and set(s["data"]) == {"token"}
            assert s["stringData"]["password"].startswith("hmac-sha256:")
        first = [v for v in kb.application_versions(name) if v["version"] == 1]
        assert secrets_in(first[0]) == found  # the same value: the same digest in version 1
        listed = [a for a in kb.changes()["applications"] if a["name"] == name]
        assert listed and secrets_in(listed[0]) == found
    # admin and controller tokens read them whole (the controller deploys them)
    for kb in (admin, live_kb.client("controller")):
        for s in secrets_in(kb.get_application(name)):
            assert s["stringData"] == {"password": PASSWORD} and s["data"] == {"token": TOKEN_B64}
        for v in kb.application_versions(name):
            assert PASSWORD in json.dumps(v)


def test_an_agent_may_post_events_only_for_applications_on_its_cluster(live_kb, fresh):
    name, other = fresh("here"), fresh("elsewhere")
    admin = live_kb.admin
    cluster, far = fresh("edge"), fresh("edge")
    for app, where in ((name, cluster), (other, far)):
        admin.put_application(app, spec(app))
        admin.put_placement(app, {"desired": {"cloud-svc": [{"cluster": where, "replicas": 1}]}})
    agent = live_kb.client("agent", cluster)
    made = agent.post_event({"type": "workload", "reason": "Observed", "application": name, "message": "ok"})
    assert made["role"] == "agent" and made["cluster"] == cluster
    for app in (other, fresh("unknown")):
        with pytest.raises(KBError) as err:
            agent.post_event({"type": "workload", "reason": "Forged", "application": app, "message": "x"})
        assert err.value.status == 403
        assert f"{app!r} is not placed on {cluster!r}" in err.value.message
    assert not [e for e in admin.list_events(application=other) if e["reason"] == "Forged"]
    agent.post_event({"type": "cluster", "reason": "Observed", "message": "no application named"})
    admin.post_event({"type": "deploy", "reason": "Note", "application": other, "message": "admins may"})


def test_qonnect_plan_reads_the_kb_from_the_environment(live_kb, monkeypatch, capsys, tmp_path):
    """Issue 34.8: QONNECT_KB_URL and QONNECT_KB_TOKEN, as `qonnect status` reads them."""
    spec_file = tmp_path / "app.yml"
    spec_file.write_text(yaml.safe_dump(spec("envplan")))
    monkeypatch.setenv("QONNECT_KB_URL", live_kb.url)
    monkeypatch.setenv("QONNECT_KB_TOKEN", live_kb.token("reader"))
    code = main(["plan", "--spec", str(spec_file), "--exclude", "no-such-cluster"])
    err = capsys.readouterr().err
    assert code == 2 and "'no-such-cluster' is not a known cluster" in err, err
    assert "cannot read the inventory" not in err  # it read the KB's inventory
