"""Group commit: one thread applies every write, many per transaction, and acknowledges each
request only after the transaction holding it has committed.

With SQLite's ``synchronous=FULL`` (and PostgreSQL's default ``synchronous_commit``) every commit
is an fsync; batching all writes that queued up while the previous commit was flushing turns
thousands of heartbeats per second into a few dozen fsyncs without acknowledging anything that
is not yet durable.

A write is a function ``fn(conn) -> result``. A function should raise its domain errors (404,
409, ...) before it writes; if it raises a database error instead, the batch is rolled back and
its writes are retried one per transaction, so one bad write never fails the others.

A bulk write (``submit_bulk``) is a payload for a handler registered by kind, which gets all
consecutive payloads of its kind in a batch at once and returns one result (or HTTPException)
per payload: agent reports are merged this way with a few set-based statements per batch.

A ``commit_interval`` makes a transaction start at most that often, so under load the writes of
the interval share one transaction instead of a stream of transactions of a few writes each,
each paying its fixed cost (PostgreSQL: per statement and round trip in both processes; SQLite:
the statements and the fsync). An idle KB's first write does not wait. A bulk kind named in
``one_statement`` writes with a single statement, so a batch of only that kind needs no BEGIN
and COMMIT around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import HTTPException

from qonnect.kb.storage import Conn, Database, is_conflict, is_unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
CONFLICT_RETRIES = 5
_STOP = object()


def _settle(items: list[tuple[Any, bool, Any]]) -> None:
    for fut, ok, value in items:
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


class _Call:
    """Stands in for a future in ``_settle``: the result goes straight to a callback."""

    __slots__ = ("callback", "called")

    def __init__(self, callback: Callable[[bool, Any], None]) -> None:
        self.callback = callback
        self.called = False

    def done(self) -> bool:
        return self.called

    def set_result(self, value: Any) -> None:
        self._call(True, value)

    def set_exception(self, exc: BaseException) -> None:
        self._call(False, exc)

    def _call(self, ok: bool, value: Any) -> None:
        self.called = True
        try:
            self.callback(ok, value)
        except Exception:  # the other writes of the batch are still to be settled
            log.exception("answering a write failed")


class _Bulk:
    __slots__ = ("kind", "payload")

    def __init__(self, kind: str, payload: Any) -> None:
        self.kind = kind
        self.payload = payload


class _Locked:
    """A write that needs a named lock (``Conn.lock``); the writer takes the locks of a whole
    batch first, in sorted order, so KB instances sharing a database never deadlock on them."""

    __slots__ = ("fn", "key")

    def __init__(self, fn: Callable[[Conn], Any], key: tuple[str, str]) -> None:
        self.fn = fn
        self.key = key

    def __call__(self, conn: Conn) -> Any:
        return self.fn(conn)


class GroupWriter:
    """The single writer thread of a KB process."""

    def __init__(
        self,
        db: Database,
        max_batch: int = 1000,
        bulk: dict[str, Callable[[Conn, list], list]] | None = None,
        commit_interval: float = 0.0,
        one_statement: frozenset[str] = frozenset(),
    ) -> None:
        self.db = db
        self.max_batch = max_batch
        self.commit_interval = commit_interval
        self.bulk = bulk or {}
        self.one_statement = one_statement
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kb-writer", daemon=True)
        self._conn: Conn | None = None

    def start(self) -> None:
        self._conn = self.db.connect(writer=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout=30)
        if self._conn is not None:
            self._conn.close()

    async def submit(self, fn: Callable[[Conn], T], lock: tuple[str, str] | None = None) -> T:
        """Queue a write and wait until it is committed (or failed); ``lock`` names the record
        it reads and then writes (kind, name), locked for its transaction."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put((fn if lock is None else _Locked(fn, lock), loop, fut))
        return await fut

    async def submit_bulk(self, kind: str, payload: Any) -> Any:
        """Queue a payload for the bulk handler ``kind``; wait until it is committed."""
        return await self.enqueue_bulk(kind, payload, asyncio.get_running_loop())

    def enqueue_bulk(self, kind: str, payload: Any, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """Queue a payload for the bulk handler ``kind``; the future (of ``loop``) is settled
        once it is committed."""
        fut = loop.create_future()
        self._queue.put((_Bulk(kind, payload), loop, fut))
        return fut

    def enqueue_bulk_call(
        self, kind: str, payload: Any, loop: asyncio.AbstractEventLoop, callback: Callable[[bool, Any], None]
    ) -> None:
        """Like ``enqueue_bulk``, but ``callback(ok, result or error)`` is called in ``loop``
        once it is committed: for the HTTP protocol, which needs no future (a future and its
        scheduled callback per report were a tenth of the event loop's time)."""
        self._queue.put((_Bulk(kind, payload), loop, _Call(callback)))

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        started = 0.0
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            wait = started + self.commit_interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the others of this interval join the batch
            started = time.monotonic()
            batch = [item]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            try:
                self._apply(batch)
            except Exception as exc:  # never let the writer thread die: fail this batch only
                log.exception("the writer failed on a batch of %d writes", len(batch))
                for _fn, loop, fut in batch:
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(_settle, [(fut, False, exc)])
            if stop:
                return

    def _conn_ok(self) -> Conn:
        if self._conn is None:
            self._conn = self.db.connect(writer=True)
        return self._conn

    def _apply(self, batch: list[tuple]) -> None:
        try:
            results = self._transaction(batch)
        except Exception as exc:
            results = [(False, exc)] * len(batch)
            if not is_unavailable(exc):  # one bad write: find it, let the others through
                log.warning("group commit of %d writes failed (%s); retrying one by one", len(batch), exc)
                results = [self._alone(entry) for entry in batch]
        by_loop: dict[Any, list] = {}
        for (_fn, loop, fut), (ok, value) in zip(batch, results, strict=True):
            by_loop.setdefault(loop, []).append((fut, ok, value))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # the event loop is gone (shutdown): nobody waits any more
                pass

    def _alone(self, entry: tuple) -> tuple[bool, Any]:
        """One write in its own transaction; retried while another KB instance sharing the
        database made it fail (deadlock, a key inserted first): re-run, it reads their data."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                return self._transaction([entry])[0]
            except Exception as exc:
                if not is_conflict(exc) or attempt == CONFLICT_RETRIES - 1:
                    return (False, exc)
                time.sleep(0.005 * (attempt + 1))
        raise AssertionError("unreachable")

    def _transaction(self, batch: list[tuple]) -> list[tuple[bool, Any]]:
        first = batch[0][0]
        if (
            isinstance(first, _Bulk)
            and first.kind in self.one_statement
            and all(isinstance(e[0], _Bulk) and e[0].kind == first.kind for e in batch)
        ):
            return self._statement(first.kind, batch)
        try:
            conn = self._conn_ok()
            conn.begin()
        except Exception:
            self._reset()
            raise
        results: list[tuple[bool, Any]] = []
        started = time.perf_counter()
        try:
            for key in sorted({entry[0].key for entry in batch if isinstance(entry[0], _Locked)}):
                conn.lock(*key)
            i = 0
            while i < len(batch):
                fn = batch[i][0]
                if isinstance(fn, _Bulk):
                    j = i
                    while j < len(batch) and isinstance(batch[j][0], _Bulk) and batch[j][0].kind == fn.kind:
                        j += 1
                    out = self.bulk[fn.kind](conn, [entry[0].payload for entry in batch[i:j]])
                    results.extend((not isinstance(r, HTTPException), r) for r in out)
                    i = j
                    continue
                try:
                    results.append((True, fn(conn)))
                except HTTPException as exc:
                    results.append((False, exc))
                i += 1
            applied = time.perf_counter()
            conn.commit()
        except Exception:
            conn.rollback()
            self._reset_if_broken()
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "committed %d writes: %.1f ms to apply, %.1f ms to commit",
                len(batch),
                (applied - started) * 1000,
                (time.perf_counter() - applied) * 1000,
            )
        return results

    def _statement(self, kind: str, batch: list[tuple]) -> list[tuple[bool, Any]]:
        """A batch of one bulk kind whose handler writes with a single statement: run without
        BEGIN and COMMIT (the connection is in autocommit mode), so the statement is its own
        transaction - atomic and durable when it returns, in one round trip instead of three.
        Each round trip also waits for the writer to get the GIL back from the busy event loop."""
        try:
            conn = self._conn_ok()
            out = self.bulk[kind](conn, [entry[0].payload for entry in batch])
        except Exception:
            self._reset_if_broken()
            raise
        return [(not isinstance(r, HTTPException), r) for r in out]

    def _reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _reset_if_broken(self) -> None:
        conn = self._conn
        if conn is not None and conn.dialect == "postgresql" and (conn.raw.closed or conn.raw.broken):
            self._reset()
