"""Storage and migrations on SQLite (PostgreSQL runs the same code in tests/integration/kb)."""

from __future__ import annotations

import pytest
from qonnect.kb import auth, migrations
from qonnect.kb.storage import Database, StorageError


def test_migrations_apply_once_and_report_the_version(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    assert migrations.current_version(db) == 0
    assert migrations.migrate(db) == [m[0] for m in migrations.MIGRATIONS]
    assert migrations.migrate(db) == []
    assert migrations.current_version(db) == migrations.LATEST
    with db.reader() as conn:
        assert conn.one("PRAGMA journal_mode")[0] == "wal"
    db.close()


def test_writes_use_full_sync(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    conn = db.connect()
    assert conn.one("PRAGMA synchronous")[0] == 2  # FULL
    db.close()


def test_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(StorageError) as err:
        Database(f"sqlite://{tmp_path / 'nope' / 'kb.sqlite'}")
    assert "does not exist" in str(err.value)


def test_tokens_are_stored_only_as_hashes(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    conn = db.connect()
    conn.begin()
    made = auth.insert_token(conn, "agent", "edge-1", None, 1.0)
    conn.commit()
    rows = conn.all("SELECT * FROM tokens")
    assert made["token"] not in repr(rows)
    assert made["token"][len(auth.PREFIX) :][:6] not in made["name"]
    assert auth.lookup(conn, auth.hash_token(made["token"])) == auth.Principal(
        made["name"], "agent", "edge-1"
    )
    assert auth.lookup(conn, auth.hash_token(made["token"] + "x")) is None
    db.close()


def test_the_token_cache_rereads_tokens_only_after_a_token_write(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    conn = db.connect()
    cache = auth.TokenCache()

    def reload() -> bool:
        with db.reader() as snapshot:
            return cache.reload(snapshot)

    def write(fn):
        conn.begin()
        out = fn(conn)
        conn.commit()
        return out

    assert reload() is True  # the first time: everything
    assert reload() is False  # nothing changed: only the counter was read
    made = write(lambda c: auth.insert_token(c, "agent", "edge-1", "a", 1.0))
    digest = auth.hash_token(made["token"])
    assert cache.get(digest) is None
    assert reload() is True and cache.get(digest) == auth.Principal("a", "agent", "edge-1")
    assert reload() is False
    write(lambda c: auth.revoke_token_id(c, made["id"]))
    assert reload() is True and cache.get(digest) is None
    other = write(lambda c: auth.insert_token(c, "reader", None, "r", 2.0))
    assert reload() is True
    write(lambda c: auth.revoke_token(c, "r"))
    assert reload() is True and cache.get(auth.hash_token(other["token"])) is None
    # revoking what is not there changes nothing: no instance rereads 10,000 tokens for it
    assert write(lambda c: auth.revoke_token(c, "r")) == 0
    assert write(lambda c: auth.revoke_token_id(c, made["id"])) == 0
    assert reload() is False
    db.close()


def test_history_keeps_each_applications_newest_rows(tmp_path, monkeypatch):
    """Rows of several applications interleave (ids are global): each keeps its own newest."""
    import time

    from qonnect.kb import ops, queries
    from qonnect.kb.models import HistoryIn

    monkeypatch.setattr(ops, "HISTORY_KEPT", 3)
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    conn = db.connect()
    spec = {"apiVersion": "qonnect.io/v1", "kind": "Application", "metadata": {"name": "x"}}
    for app in ("a", "b"):
        ops.put_application(conn, app, spec, {"name": app}, time.time())
    for i in range(5):
        for app in ("a", "b"):
            body = HistoryIn.model_validate(
                {
                    "version": 1,
                    "trigger": "deploy",
                    "outcome": "succeeded",
                    "started": float(i),
                    "ended": float(i),
                    "changes": [{"service": "web", "from": [], "to": [f"c{i}"]}],
                }
            )
            ops.record_history(conn, app, body, "admin", time.time())
    with db.reader() as reader:
        for app in ("a", "b"):
            rows = queries.list_history(reader, app, 50)["history"]
            assert [r["to"] for r in rows] == [["c4"], ["c3"], ["c2"]], app
    db.close()
