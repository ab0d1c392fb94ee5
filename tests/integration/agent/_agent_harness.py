"""Process helpers shared by the agent tests (the fixtures that use them are in conftest.py).

Kept out of conftest.py so test modules import them by a unique name: several test directories
have a conftest.py, and ``from conftest import ...`` picks whichever was loaded last.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Imported for its side effect: it puts the qonnect.core collection on sys.path.
import qonnect._collection as _collection_on_path  # noqa: F401

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

QONNECT = [sys.executable, "-m", "qonnect"]
INTERVAL = 0.5


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> object:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (KBError, KeyError, IndexError, TypeError) as exc:
            last_error = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> int:
    """SIGTERM, wait, SIGKILL as a last resort; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


class KB:
    """A ``qonnect kb serve`` process that can be stopped and started again on the same port."""

    def __init__(self, root: Path, tls: tuple[Path, Path, Path] | None = None) -> None:
        """``tls``: (certificate, key, CA bundle) to serve HTTPS."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.db = f"sqlite:///{root / 'kb.sqlite'}"
        self.port = free_port()
        self.tls = tls
        self.ca = str(tls[2]) if tls else None
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.admin = KBClient(self.url, self.token("admin", name="test-admin"), ca_path=self.ca, timeout=5)

    def token(self, role: str, cluster: str | None = None, name: str | None = None) -> str:
        argv = [*QONNECT, "kb", "token", "create", "--db", self.db, "--role", role]
        argv += ["--cluster", cluster] if cluster else []
        argv += ["--name", name] if name else []
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout.strip()

    def start(self) -> None:
        log = open(self.root / "kb.log", "ab")  # noqa: SIM115 - handed to the child process
        argv = [
            *QONNECT,
            "kb",
            "serve",
            "--db",
            self.db,
            "--port",
            str(self.port),
            "--heartbeat-timeout",
            "5",
        ]
        if self.tls:
            argv += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        self.proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(self.admin.healthz, 60, "the KB to answer /healthz")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


class Agent:
    """One ``qonnect agent`` process and the files it uses."""

    def __init__(self, kb: KB, federation: dict, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.cluster = next(c for c in federation["clusters"] if c["name"] == name)
        self.peers = ",".join(
            f"{c['name']}={c['server']}" for c in federation["clusters"] if c["name"] != name
        )
        root.mkdir(parents=True, exist_ok=True)
        self.token_file = root / "token"
        self.token_file.write_text(kb.token("agent", cluster=name) + "\n")
        os.chmod(self.token_file, 0o600)
        self.state_dir = root / "state"
        self.log = root / "agent.log"
        self.kb = kb
        self.proc: subprocess.Popen | None = None
        self.not_ready_timeout = 60.0  # --not-ready-timeout: the grace of workloads without their own

    def argv(self) -> list[str]:
        return [
            *QONNECT,
            "-v",
            "agent",
            "--cluster",
            self.name,
            "--kubeconfig",
            self.cluster["kubeconfig"],
            "--kb",
            self.kb.url,
            "--token-file",
            str(self.token_file),
            "--interval",
            str(INTERVAL),
            "--source-address",
            self.cluster["address"],
            "--peers",
            self.peers,
            "--state-dir",
            str(self.state_dir),
            "--not-ready-timeout",
            f"{self.not_ready_timeout:g}",
            *(["--kb-ca", self.kb.ca] if self.kb.ca else []),
        ]

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the child process
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def stop(self) -> int:
        assert self.proc is not None
        code = stop_process(self.proc)
        self.proc = None
        return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def outbox(self) -> list[dict]:
        path = self.state_dir / "outbox.json"
        return json.loads(path.read_text()) if path.exists() else []

    def status(self) -> dict:
        return self.kb.admin.get_cluster(self.name)["status"]
