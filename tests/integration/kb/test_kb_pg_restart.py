"""A KB instance survives its PostgreSQL restarting: requests fail clearly (503) while it is
down, nothing acknowledged is lost, and it reconnects by itself.

Restarting the shared test server would disturb other tests, so this test creates a PostgreSQL
cluster of its own (initdb in a temporary directory, on a free port) and removes it afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from support import free_port

pytestmark = pytest.mark.timeout(300)


class OwnPostgres:
    """initdb + pg_ctl from the installed PostgreSQL, as the postgres user when run as root."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            pytest.fail("PostgreSQL server binaries (initdb) are needed: apt-get install postgresql")
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="qkb-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.dir, check=False)
        assert done.returncode == 0, f"{tool}: {done.stdout}\n{done.stderr}"

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-w",
            "-o",
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture()
def own_postgres() -> Iterator[OwnPostgres]:
    pg = OwnPostgres()
    try:
        pg.start()
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE qkb")
        pg.url = pg.url.rsplit("/", 1)[0] + "/qkb"
        yield pg
    finally:
        pg.remove()


class Writers:
    """Events and reports written through the KB; remembers exactly what was acknowledged."""

    def __init__(self, kb: KBClient, agent: KBClient) -> None:
        self.kb, self.agent = kb, agent
        self.stop = threading.Event()
        self.acked_events: list[str] = []
        self.acked_seq = 0
        self.statuses: dict[int, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._events, args=(i,)) for i in range(3)]
        self.threads.append(threading.Thread(target=self._reports))

    def _note(self, status: int) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def _events(self, writer: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            message = f"w{writer}-{n}"
            try:
                self.kb.post_event({"type": "restart-test", "message": message})
            except KBError as exc:
                self._note(exc.status)
                time.sleep(0.05)
                continue
            self._note(201)
            with self.lock:
                self.acked_events.append(message)

    def _reports(self) -> None:
        seq = 0
        while not self.stop.is_set():
            seq += 1
            try:
                self.agent.report("pg-1", {"seq": seq, "ts": time.time()})
            except KBError as exc:
                self._note(exc.status)
                time.sleep(0.05)
                continue
            self._note(200)
            with self.lock:
                self.acked_seq = seq

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def test_the_kb_survives_postgresql_restarting(own_postgres, kb_process, make_token):
    pg = own_postgres
    admin_token = make_token(pg.url, "admin")
    kb = kb_process(pg.url)
    admin = KBClient(kb.url, admin_token, timeout=15)
    admin.register_cluster({"name": "pg-1", "tier": "edge"})
    agent = KBClient(
        kb.url,
        admin.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": "pg-1"})["token"],
        timeout=15,
    )
    with Writers(admin, agent) as load:
        time.sleep(2)
        before = len(load.acked_events)
        assert before > 0
        pg.stop()
        time.sleep(1)
        with pytest.raises(KBError) as err:  # down: a clear 503, for reads and writes
            admin.list_clusters()
        assert err.value.status == 503 and "database" in err.value.message
        with pytest.raises(KBError) as err:
            KBClient(kb.url, None).healthz()
        assert err.value.status == 503
        time.sleep(2)
        during = len(load.acked_events)
        pg.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(load.acked_events) <= during + 20:
            time.sleep(0.2)
        assert len(load.acked_events) > during + 20, "the KB did not reconnect by itself"
        assert admin.healthz()["database"] == "postgresql"
    assert kb.proc.poll() is None  # the same process throughout
    assert load.statuses.get(503, 0) > 0, load.statuses
    assert set(load.statuses) <= {200, 201, 503}, load.statuses
    with psycopg.connect(pg.url) as conn:
        stored = {
            r[0] for r in conn.execute("SELECT message FROM events WHERE type = 'restart-test'").fetchall()
        }
        report_seq = conn.execute("SELECT report_seq FROM clusters WHERE name = 'pg-1'").fetchone()[0]
    lost = [m for m in load.acked_events if m not in stored]
    assert lost == [], f"{len(lost)} acknowledged events lost: {lost[:5]}"
    assert report_seq >= load.acked_seq
