"""Attacks on a KB of its own (so a locked placement cannot disturb other tests), on both
backends: specs that cannot be stored, poisoned records, fencing edge cases."""

from __future__ import annotations

import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from test_kb_api import raw, spec

pytestmark = pytest.mark.timeout(180)
FENCE_MAX = 2**53 - 1
BACKENDS = ("sqlite", "postgresql")


class OwnKB:
    def __init__(self, backend: str, db_url: str, proc, admin_token: str) -> None:
        self.backend = backend
        self.db_url = db_url
        self.url = proc.url
        self.admin_token = admin_token
        self.admin = KBClient(proc.url, admin_token)

    def client(self, role: str) -> KBClient:
        return KBClient(self.url, self.admin.request("POST", "/api/v1/tokens", {"role": role})["token"])

    def sql(self, statement: str, args: tuple = ()) -> list[tuple]:
        """Straight on the database, as an older KB (or an operator) would have written."""
        if self.backend == "sqlite":
            with sqlite3.connect(self.db_url.removeprefix("sqlite://"), timeout=30) as conn:
                return conn.execute(statement, args).fetchall()
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), args)
            return cur.fetchall() if cur.description else []


@pytest.fixture(params=BACKENDS)
def own_kb(request, db_url_factory, kb_process, make_token) -> OwnKB:
    db = db_url_factory(request.param)
    admin = make_token(db, "admin")
    return OwnKB(request.param, db, kb_process(db), admin)


def _nested(depth: int) -> dict:
    inner: dict = {"leaf": 1}
    for _i in range(depth):
        inner = {"a": inner}
    return inner


def _bad_specs(name: str) -> dict[str, tuple[bytes, str]]:
    """Request bodies and the field each 422 must name."""
    surrogate = spec(name)
    surrogate["spec"]["cloud_svc"][0]["metadata"]["annotations"] = {"note": "\udc00"}
    deep = spec(name)
    deep["spec"]["cloud_svc"][0]["metadata"]["annotations"] = {"deep": _nested(500)}
    nan, inf = spec(name), spec(name)
    nan["spec"]["cloud_svc"][0]["spec"]["replicas"] = float("nan")
    inf["spec"]["cloud_svc"][0]["spec"]["x-weight"] = float("-inf")
    return {
        "surrogate": (json.dumps(surrogate).encode(), "spec.cloud_svc[0].metadata.annotations.note"),
        "deep": (json.dumps(deep).encode(), "spec.cloud_svc[0].metadata.annotations.deep"),
        "nan": (json.dumps(nan).encode(), "spec.cloud_svc[0].spec.replicas"),
        "infinity": (json.dumps(inf).encode(), "spec.cloud_svc[0].spec.x-weight"),
    }


def test_unstorable_specs_are_422_naming_the_field_and_nothing_is_stored(own_kb, fresh):
    kb = own_kb
    good = fresh("good")
    kb.admin.put_application(good, spec(good))
    for case, (body, field) in _bad_specs("bad").items():
        name = fresh(f"bad-{case}")
        body = body.replace(b'"bad"', json.dumps(name).encode())
        status, answer = raw(kb, "PUT", f"/api/v1/applications/{name}", body, kb.admin_token)
        assert status == 422, (case, status, answer)
        assert any(e["field"].startswith(field) for e in answer["errors"]), (case, answer)
        with pytest.raises(KBError) as err:
            kb.admin.get_application(name)
        assert err.value.status == 404, case
        assert kb.sql("SELECT COUNT(*) FROM application_versions WHERE name = ?", (name,)) == [(0,)]
    for role in ("admin", "controller", "reader"):
        assert [a["name"] for a in kb.client(role).list_applications()] == [good]


def test_a_poisoned_record_cannot_break_the_application_list(own_kb, fresh):
    """Records an older KB stored (lone surrogate, NaN, 500 levels deep) are left out of the
    list, named in a 409 when asked for directly, and the others are served."""
    kb = own_kb
    good = fresh("good")
    kb.admin.put_application(good, spec(good))
    poisons = {
        fresh("surrogate"): json.dumps({"x": "\udc00"}),
        fresh("nan"): json.dumps({"x": float("nan")}),
        fresh("deep"): json.dumps(_nested(500)),
    }
    for name, text in poisons.items():
        kb.sql(
            "INSERT INTO applications (name, version, digest, created, updated) VALUES (?, 1, 'x', 0, 0)",
            (name,),
        )
        kb.sql(
            "INSERT INTO application_versions (name, version, spec, normalized, digest, created)"
            " VALUES (?, 1, ?, ?, 'x', 0)",
            (name, text, text),
        )
    for role in ("admin", "controller", "reader"):
        assert [a["name"] for a in kb.client(role).list_applications()] == [good]
    assert kb.admin.inventory()["clusters"] == []
    for name in poisons:
        with pytest.raises(KBError) as err:
            kb.admin.get_application(name)
        assert err.value.status == 409 and name in err.value.message
        kb.admin.delete_application(name)


def _placement(cluster: str) -> dict:
    return {"desired": {"svc": [{"cluster": cluster, "replicas": 1}]}}


def test_fencing_edge_cases(own_kb, fresh):
    kb = own_kb
    app = fresh("app")
    kb.admin.put_application(app, spec(app))
    ctl = kb.client("controller")
    ctl.put_placement(app, _placement("a"), {"term": 1, "seq": 1})
    ctl.put_placement(app, _placement("a"), {"term": 1, "seq": 1})  # a retry: accepted
    with pytest.raises(KBError) as err:
        ctl.put_placement(app, _placement("b"), {"term": 1, "seq": 1})
    assert err.value.status == 409 and "fencing" in err.value.message
    assert ctl.get_placement(app)["desired"] == _placement("a")["desired"]

    # many writers holding one token: exactly one wins
    barrier = threading.Barrier(20)

    def racer(i: int) -> int:
        barrier.wait()
        try:
            ctl.put_placement(app, _placement(f"r{i}"), {"term": 2, "seq": 0})
        except KBError as exc:
            return exc.status
        return 200

    with ThreadPoolExecutor(20) as pool:
        statuses = sorted(pool.map(racer, range(20)))
    assert statuses == [200] + [409] * 19, statuses
    winner = ctl.get_placement(app)["desired"]["svc"][0]["cluster"]

    # no coercion, no absurd numbers
    for bad in ('"9"', "true", "6.0", "-1", str(FENCE_MAX + 1), str(2**63 - 1), "null"):
        body = f'{{"desired": {{}}, "fencing": {{"term": {bad}, "seq": 5}}}}'.encode()
        status, answer = raw(kb, "PUT", f"/api/v1/placements/{app}", body, kb.admin_token)
        assert status == 422 and "fencing.term" in answer["detail"], (bad, status, answer)
        body = f'{{"desired": {{}}, "fencing": {{"term": 3, "seq": {bad}}}}}'.encode()
        status, answer = raw(kb, "PUT", f"/api/v1/placements/{app}", body, kb.admin_token)
        assert status == 422 and "fencing.seq" in answer["detail"], (bad, status, answer)
    assert ctl.get_placement(app)["desired"]["svc"][0]["cluster"] == winner

    # the largest token locks the placement until an admin resets it (a controller may not)
    ctl.put_placement(app, _placement("max"), {"term": FENCE_MAX, "seq": FENCE_MAX})
    with pytest.raises(KBError) as err:
        ctl.put_placement(app, _placement("c"), {"term": 5, "seq": 0})
    assert err.value.status == 409
    with pytest.raises(KBError) as err:
        ctl.request("DELETE", f"/api/v1/placements/{app}/fencing")
    assert err.value.status == 403
    reset = kb.admin.request("DELETE", f"/api/v1/placements/{app}/fencing")
    assert reset["fencing"] is None and reset["desired"] == _placement("max")["desired"]
    assert ctl.put_placement(app, _placement("c"), {"term": 5, "seq": 0})["fencing"] == {"term": 5, "seq": 0}
    stored = kb.sql("SELECT term, seq FROM placements WHERE application = ?", (app,))
    assert stored == [(5, 0)]
