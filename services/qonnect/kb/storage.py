"""One storage interface over SQLite (default) and PostgreSQL (psycopg 3).

SQL is written once with ``?`` placeholders; the PostgreSQL connection rewrites them to ``%s``.
Reads use a per-thread SQLite connection or a small PostgreSQL pool; all writes go through the
single writer thread (``writer.GroupWriter``), so neither backend sees concurrent writers.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    import psycopg
except ImportError:  # pragma: no cover - only SQLite is usable without psycopg
    psycopg = None  # type: ignore[assignment]  # optional dependency


class StorageError(Exception):
    """The database cannot be used (bad URL, unreachable server, broken file)."""


class Conn:
    """A thin wrapper so both backends take the same SQL and return plain tuples."""

    def __init__(self, raw: Any, dialect: str) -> None:
        self.raw = raw
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(self._sql(sql), tuple(params))

    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> None:
        if not rows:
            return
        if self.dialect == "postgresql":
            with self.raw.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.raw.executemany(sql, rows)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return list(self.execute(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        return self.execute(sql, params).fetchone()

    def lock(self, kind: str, name: str) -> None:
        """Hold a lock on one named record until the transaction ends, across KB processes.

        Several KB instances may share one PostgreSQL database; a read-then-write (a fenced
        placement, a new application version) must not interleave with another instance's. On
        SQLite ``BEGIN IMMEDIATE`` already makes every write transaction exclusive.
        """
        if self.dialect == "postgresql":
            self.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (f"{kind}/{name}",))

    def begin(self, write: bool = True) -> None:
        if self.dialect == "sqlite":
            self.raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        else:
            self.raw.execute("BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.close()


def _sqlite_path(url: str) -> str:
    path = url[len("sqlite://") :] if url.startswith("sqlite://") else url
    if not path:
        raise StorageError(f"--db {url!r}: expected sqlite:///PATH or postgresql://...")
    return path


def _create_private(path: str) -> None:
    """Create a new SQLite file readable by its owner only, whatever the umask: it holds the
    credentials fields and token hashes. (SQLite gives its -wal and -shm files the same mode.)"""
    if path == ":memory:":
        return
    try:
        fd = os.open(Path(path).expanduser(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror or exc}") from None
    os.close(fd)


class Database:
    """Connections for one database URL: ``sqlite:///path`` (or a path) or ``postgresql://...``."""

    def __init__(self, url: str, pool_size: int = 8) -> None:
        self.url = url
        if url.startswith(("postgresql://", "postgres://")):
            if psycopg is None:
                raise StorageError("PostgreSQL needs psycopg: pip install 'psycopg[binary]'")
            self.dialect = "postgresql"
        else:
            self.dialect = "sqlite"
            self.path = _sqlite_path(url)
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise StorageError(f"--db {url!r}: directory {parent} does not exist")
            _create_private(self.path)
        self._local = threading.local()
        self._pool: queue.LifoQueue[Conn] = queue.LifoQueue()
        self._pool_slots = threading.BoundedSemaphore(pool_size)
        self._all: list[Conn] = []
        self._lock = threading.Lock()

    def describe(self) -> str:
        """The URL without any password, for logs."""
        if self.dialect == "sqlite":
            return f"sqlite://{self.path}"
        try:
            info = psycopg.conninfo.conninfo_to_dict(self.url)
        except Exception:
            return "postgresql://?"
        return f"postgresql://{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"

    def connect(self, writer: bool = False) -> Conn:
        """A new connection in autocommit mode; transactions are explicit (``Conn.begin``).

        The writer's SQLite connection does not checkpoint the WAL itself (that would stall a
        commit while the database file is synced); ``checkpoint`` does it from another thread.
        """
        raw: sqlite3.Connection | psycopg.Connection
        try:
            if self.dialect == "sqlite":
                raw = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
                raw.execute("PRAGMA journal_mode=WAL")
                raw.execute("PRAGMA synchronous=FULL")
                raw.execute("PRAGMA busy_timeout=30000")
                if writer:
                    raw.execute("PRAGMA wal_autocheckpoint=0")
            else:
                raw = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open {self.describe()}: {exc}") from None
        except Exception as exc:  # psycopg.Error and conninfo errors
            if psycopg is not None and isinstance(exc, (psycopg.Error, psycopg.ProgrammingError)):
                raise StorageError(f"cannot connect to {self.describe()}: {exc}") from None
            raise
        conn = Conn(raw, self.dialect)
        with self._lock:
            self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def reader(self) -> Iterator[Conn]:
        """A connection for reads inside one consistent snapshot."""
        if self.dialect == "sqlite":
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self.connect()
            conn.begin(write=False)
            try:
                yield conn
            finally:
                conn.rollback()
            return
        with self._pool_slots:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                conn = self.connect()
            broken = False
            try:
                conn.begin(write=False)
                yield conn
            except Exception:
                broken = bool(conn.raw.closed or conn.raw.broken)
                raise
            finally:
                conn.rollback()
                if broken:
                    conn.close()
                else:
                    self._pool.put(conn)

    def checkpoint(self) -> None:
        """Copy committed WAL pages into the SQLite file without blocking the writer."""
        if self.dialect != "sqlite":
            return
        conn = getattr(self._local, "checkpointer", None)
        if conn is None:
            conn = self._local.checkpointer = self.connect()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def is_conflict(exc: BaseException) -> bool:
    """True for errors another KB instance's concurrent transaction caused (deadlock,
    serialization failure, a key it inserted first): the same write, retried, succeeds."""
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    return state.startswith("40") or state == "23505"  # transaction rollback; unique violation


def is_unavailable(exc: BaseException) -> bool:
    """True for errors that mean 'database down', answered with 503 instead of 500."""
    if isinstance(exc, StorageError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True
    return psycopg is not None and isinstance(exc, psycopg.OperationalError) and not is_conflict(exc)
