"""Process helpers shared by the agent tests (the fixtures that use them are in conftest.py).

Kept out of conftest.py so test modules import them by a unique name: several test directories
have a conftest.py, and ``from conftest import ...`` picks whichever was loaded last.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from support import free_port, qonnect_cmd, start_process, stop_process
from support import wait_for as _wait_for
from support.federation import create_token, started_testbed

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

INTERVAL = 0.5

# What a check may raise while the KB or the agent's first report is not there yet.
wait_for = functools.partial(_wait_for, interval=0.2, retry_on=(KBError, KeyError, IndexError, TypeError))


def module_testbed(tmp_path_factory, profile: str, *args: str) -> Iterator[dict]:
    """Body of a testbed fixture: ``qonnect testbed up --profile PROFILE ARGS`` (support.federation);
    the federation document with its directory under "dir", for the testbed's fault commands."""
    root = tmp_path_factory.mktemp(profile)
    with started_testbed(root, "--profile", profile, *args, "--timeout", "60") as federation:
        federation["dir"] = str(root)
        yield federation


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
        return create_token(self.db, role, name=name, cluster=cluster)

    def start(self) -> None:
        argv = [
            *qonnect_cmd(),
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
        self.proc = start_process(argv, self.root / "kb.log")
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
        self.started_after = 0
        self.not_ready_timeout = 60.0  # --not-ready-timeout: the grace of workloads without their own

    def argv(self) -> list[str]:
        return [
            *qonnect_cmd(),
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
        self.started_after = self.seq()
        self.proc = start_process(self.argv(), self.log)

    def seq(self) -> int:
        """The sequence number of the newest report of this cluster the KB holds (0: none)."""
        try:
            return self.status()["seq"] or 0
        except (KBError, KeyError):
            return 0

    def reported(self, timeout: float = 60) -> dict:
        """Wait for a report of this run of the agent: one newer than the KB held at its start
        (a report of an earlier agent of the same cluster does not count)."""
        return wait_for(
            lambda: (s := self.status())["seq"] and s["seq"] > self.started_after and s,
            timeout,
            f"{self.name}'s first report",
        )

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
