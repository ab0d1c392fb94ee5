"""The group writer: commit interval, and answers by callback (the HTTP protocol's path)."""

from __future__ import annotations

import asyncio
import time

from fastapi import HTTPException
from qonnect.kb import migrations
from qonnect.kb.app import COMMIT_INTERVAL, close_state, open_state
from qonnect.kb.deps import Settings
from qonnect.kb.storage import Database
from qonnect.kb.writer import GroupWriter


class CountingWriter(GroupWriter):
    """Records the size of every transaction it runs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transactions: list[int] = []

    def _transaction(self, batch):
        self.transactions.append(len(batch))
        return super()._transaction(batch)


def _writer(tmp_path, interval: float) -> CountingWriter:
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)

    def echo(_conn, payloads: list) -> list:
        return [HTTPException(404, "no") if p < 0 else p for p in payloads]

    writer = CountingWriter(db, bulk={"echo": echo}, commit_interval=interval)
    writer.start()
    return writer


def test_writes_within_the_commit_interval_share_one_transaction(tmp_path):
    writer = _writer(tmp_path, 0.3)

    async def scenario() -> tuple[float, list]:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        first = await writer.submit_bulk("echo", 0)  # an idle writer does not wait
        first_latency = time.monotonic() - started
        await asyncio.sleep(0.02)
        futures = []
        for i in range(1, 21):  # arrive while the interval since the first one runs
            futures.append(writer.enqueue_bulk("echo", i, loop))
            await asyncio.sleep(0.005)
        assert first == 0
        return first_latency, await asyncio.gather(*futures)

    try:
        first_latency, results = asyncio.run(scenario())
    finally:
        writer.stop()
    assert results == list(range(1, 21))
    assert first_latency < 0.25, first_latency
    # the first write alone, then the twenty of the next interval together (the first of them
    # opens the transaction after the interval; the rest queued meanwhile)
    assert writer.transactions[0] == 1
    assert sum(writer.transactions) == 21
    assert len(writer.transactions) <= 3, writer.transactions


def test_without_an_interval_each_idle_write_commits_at_once(tmp_path):
    writer = _writer(tmp_path, 0.0)

    async def scenario() -> list:
        out = []
        for i in range(5):
            out.append(await writer.submit_bulk("echo", i))
        return out

    try:
        assert asyncio.run(scenario()) == list(range(5))
    finally:
        writer.stop()
    assert writer.transactions == [1] * 5


def test_callbacks_get_results_and_errors_and_one_failing_callback_spares_the_others(tmp_path):
    writer = _writer(tmp_path, 0.05)

    async def scenario() -> list:
        loop = asyncio.get_running_loop()
        got: list = []
        done = asyncio.Event()

        def record(ok: bool, value) -> None:
            got.append((ok, value if ok else value.status_code))
            if len(got) == 3:
                done.set()

        def broken(_ok: bool, _value) -> None:
            raise RuntimeError("the connection is gone")

        writer.enqueue_bulk_call("echo", 1, loop, record)
        writer.enqueue_bulk_call("echo", 2, loop, broken)
        writer.enqueue_bulk_call("echo", -1, loop, record)
        writer.enqueue_bulk_call("echo", 3, loop, record)
        await asyncio.wait_for(done.wait(), 10)
        return got

    try:
        got = asyncio.run(scenario())
    finally:
        writer.stop()
    assert got == [(True, 1), (False, 404), (True, 3)]


def test_the_kb_writer_batches_on_both_databases(tmp_path):
    """SQLite too: at 2,000 reports/s, a commit every 5 ms instead of one per fsync's worth of
    reports cost a quarter less CPU per report (benchmarks/kb.py)."""
    kb = open_state(Settings(db_url=f"sqlite://{tmp_path / 'kb.sqlite'}"))
    try:
        assert kb.writer.commit_interval == COMMIT_INTERVAL["sqlite"] > 0
        assert 0 < COMMIT_INTERVAL["sqlite"] < COMMIT_INTERVAL["postgresql"] <= 0.02
    finally:
        close_state(kb)
