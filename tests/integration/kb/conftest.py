"""Live KB servers (real `qonnect kb serve` processes) on SQLite and on PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (role and database ``test`` from scripts/setup-services.sh); each test session
creates its own databases there and drops them at the end, so parallel runs do not collide.
A PostgreSQL that cannot be reached fails the tests: it is part of what is tested.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

PG_ADMIN_URL = os.environ.get("QONNECT_TEST_PG", "postgresql://qonnect:qonnect@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgresql")

# `python -m qonnect.cli` would load cli.py twice (as __main__ too); run main() instead
MAIN = "import sys; from qonnect.cli import main; sys.exit(main())"


def qonnect_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", MAIN, *args]


class PgDatabases:
    """Creates throw-away databases on the test PostgreSQL server and drops them afterwards."""

    def __init__(self) -> None:
        import psycopg

        self._psycopg = psycopg
        try:
            self._admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is needed for the KB tests: {exc}")
        self.created: list[str] = []

    def new(self) -> str:
        name = f"qkb_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._admin.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        base = PG_ADMIN_URL.rsplit("/", 1)[0]
        return f"{base}/{name}"

    def close(self) -> None:
        for name in self.created:
            self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.close()


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[PgDatabases]:
    dbs = PgDatabases()
    yield dbs
    dbs.close()


class KBProcess:
    """One `qonnect kb serve` process on a free port."""

    def __init__(self, db_url: str, workdir: Path, extra: tuple[str, ...] = ()) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> KBProcess:
        port_file = self.workdir / f"port-{uuid.uuid4().hex[:6]}"
        self.log = open(self.workdir / "kb.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            qonnect_cmd(
                "kb", "serve", "--db", self.db_url, "--port", "0", "--port-file", str(port_file), *self.extra
            ),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        scheme = "https" if "--tls-cert" in self.extra else "http"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"KB exited with {self.proc.returncode}: {self.read_log()}")
            if port_file.exists():
                self.url = f"{scheme}://127.0.0.1:{port_file.read_text().strip()}"
                if self._healthy():
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"KB did not start within {timeout} s: {self.read_log()}")

    def _healthy(self) -> bool:
        try:
            KBClient(self.url, None, validate_certs=False, timeout=2).healthz()
        except KBError:
            return False
        return True

    def read_log(self) -> str:
        return (self.workdir / "kb.log").read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "log", None):
            self.log.close()


def create_token(db_url: str, role: str, cluster: str | None = None) -> str:
    """`qonnect kb token create` (run in this process: it only writes to the database)."""
    from qonnect.cli import main

    args = ["kb", "token", "create", "--db", db_url, "--role", role]
    if cluster:
        args += ["--cluster", cluster]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    return out.getvalue().strip()


@pytest.fixture(scope="session")
def make_token() -> Callable[..., str]:
    """`qonnect kb token create` straight on the database (how the first admin token is made)."""
    return create_token


@pytest.fixture(scope="session")
def db_url_factory(
    tmp_path_factory: pytest.TempPathFactory, pg_databases: PgDatabases
) -> Callable[[str], str]:
    def make(backend: str) -> str:
        if backend == "sqlite":
            return f"sqlite://{tmp_path_factory.mktemp('kb-sqlite') / 'kb.sqlite'}"
        return pg_databases.new()

    return make


@pytest.fixture()
def kb_process(tmp_path: Path) -> Iterator[Callable[..., KBProcess]]:
    """Start KB processes for one test; all of them are stopped afterwards."""
    started: list[KBProcess] = []

    def start(db_url: str, *extra: str) -> KBProcess:
        proc = KBProcess(db_url, tmp_path, extra)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


class LiveKB:
    """A running KB shared by the session's API tests, with an admin client and token factory."""

    def __init__(self, backend: str, proc: KBProcess, admin_token: str) -> None:
        self.backend = backend
        self.proc = proc
        self.url = proc.url
        self.admin_token = admin_token
        self.admin = KBClient(proc.url, admin_token)

    def token(self, role: str, cluster: str | None = None) -> str:
        body = {"role": role} if cluster is None else {"role": role, "cluster": cluster}
        return self.admin.request("POST", "/api/v1/tokens", body)["token"]

    def client(self, role: str, cluster: str | None = None) -> KBClient:
        return KBClient(self.url, self.token(role, cluster))


@pytest.fixture(scope="session", params=BACKENDS)
def live_kb(
    request: pytest.FixtureRequest,
    db_url_factory: Callable[[str], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveKB]:
    db_url = db_url_factory(request.param)
    admin = create_token(db_url, "admin")
    proc = KBProcess(
        db_url,
        tmp_path_factory.mktemp(f"kb-{request.param}"),
        ("--heartbeat-timeout", "2", "--max-body", "65536"),
    )
    proc.start()
    try:
        yield LiveKB(request.param, proc, admin)
    finally:
        proc.stop()


@pytest.fixture()
def fresh() -> Callable[[str], str]:
    """Fresh resource names, so tests sharing a KB do not see each other's records."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:8]}"
