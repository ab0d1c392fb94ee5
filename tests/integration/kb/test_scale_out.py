"""Two KB processes on one database (PostgreSQL, as docs/operations.md suggests behind a load
balancer; SQLite, two processes on one host): fenced placements and application versions stay
correct with writers racing through different instances."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from test_kb_api import spec

pytestmark = pytest.mark.timeout(300)
ROUNDS = 300


@pytest.fixture(params=("postgresql", "sqlite"))
def two_instances(request, db_url_factory, kb_process, make_token):
    """Two KB processes on one database (on SQLite: one file, as two processes on one host)."""
    db = db_url_factory(request.param)
    admin = make_token(db, "admin")
    kbs = [kb_process(db), kb_process(db)]
    return db, admin, kbs


def _connect(db: str):
    if db.startswith("sqlite://"):
        return contextlib.closing(sqlite3.connect(db.removeprefix("sqlite://"), timeout=30))
    return psycopg.connect(db, autocommit=True)


def _status(call) -> int:
    try:
        call()
    except KBError as exc:
        return exc.status
    return 200


def test_racing_fenced_writes_through_two_instances_never_store_the_older(two_instances, fresh):
    """Each round sends a newer (term, seq) to one instance and an older one to the other at
    the same moment; the database must end with the newer every time."""
    db, admin_token, kbs = two_instances
    app = fresh("race")
    KBClient(kbs[0].url, admin_token).put_application(app, spec(app))
    ctl = KBClient(kbs[0].url, admin_token).request("POST", "/api/v1/tokens", {"role": "controller"})["token"]
    clients = [KBClient(kb.url, ctl) for kb in kbs]
    clients[0].put_placement(app, {"desired": {}}, {"term": 1, "seq": 0})
    barrier = threading.Barrier(2)
    stale, answers = [], []
    with _connect(db) as check, ThreadPoolExecutor(2) as pool:
        for r in range(ROUNDS):
            newer, older = {"term": 1, "seq": 2 * r + 2}, {"term": 1, "seq": 2 * r + 1}
            first = clients[r % 2]  # alternate which instance gets the newer token
            second = clients[(r + 1) % 2]

            def send(client: KBClient, fence: dict) -> int:
                barrier.wait()
                body = {"desired": {"svc": [{"cluster": f"c-{fence['seq']}"}]}}
                return _status(lambda: client.put_placement(app, body, fence))

            got = [pool.submit(send, first, newer), pool.submit(send, second, older)]
            answers.append(tuple(f.result() for f in got))
            term, seq, desired = check.execute(
                "SELECT term, seq, desired FROM placements WHERE application = "
                + ("?" if isinstance(check, sqlite3.Connection) else "%s"),
                (app,),
            ).fetchone()
            if (term, seq) != (1, 2 * r + 2) or f"c-{2 * r + 2}" not in desired:
                stale.append((r, term, seq, desired))
    assert stale == [], f"{len(stale)} of {ROUNDS} rounds stored an older write: {stale[:5]}"
    assert all(a[0] == 200 and a[1] in (200, 409) for a in answers), set(answers)


def test_concurrent_application_puts_through_two_instances(two_instances, fresh):
    """Many writers storing versions of the same applications through both instances: never a
    500, and the versions are 1..n without gaps, each created exactly once."""
    _db, admin_token, kbs = two_instances
    apps = [fresh("shop") for _i in range(3)]
    clients = [KBClient(kb.url, admin_token) for kb in kbs]

    def put(i: int) -> tuple[str, int, dict | None]:
        app = apps[i % len(apps)]
        try:
            return app, 200, clients[i % 2].put_application(app, spec(app, image=f"nginx:{i}"))
        except KBError as exc:
            return app, exc.status, None

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(put, range(120)))
    statuses = sorted({s for _a, s, _r in results})
    assert all(s < 500 for s in statuses), statuses
    assert set(statuses) <= {200, 409}, statuses
    for app in apps:
        made = sorted(r["version"] for a, s, r in results if a == app and s == 200 and r["changed"])
        versions = [v["version"] for v in clients[0].application_versions(app)]
        assert versions == list(range(1, len(versions) + 1))
        assert made == versions, (app, made, versions)
