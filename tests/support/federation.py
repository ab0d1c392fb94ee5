"""Real federations for integration tests, started as a user would: ``qonnect testbed up``, a
``qonnect kb serve`` on SQLite, and one ``qonnect agent`` per cluster. One home for that set-up,
so each suite only says which profile, how many clusters and whether the KB speaks TLS.

Everything started here is stopped when the ``with`` block ends, also when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from support import qonnect_cmd, run_qonnect, start_process, stop_process, wait_for

# What the KB keeps of a testbed cluster's entry in federation.yaml.
CLUSTER_FIELDS = ("name", "tier", "location", "server", "kubeconfig", "context", "labels")
ECONOMICS = ("price_eur_h", "energy_kwh", "bandwidth_gbps")


def registration(entry: dict) -> dict:
    """A cluster's KB record: with its nodes' economics, which the registration owns (agent
    reports' are ignored, issue 25)."""
    record = {k: entry[k] for k in CLUSTER_FIELDS if entry.get(k) is not None}
    record["node_economics"] = {
        n["name"]: {k: n[k] for k in ECONOMICS if n.get(k) is not None} for n in entry.get("nodes") or []
    }
    return record


@contextlib.contextmanager
def started_testbed(directory: Path, *args: str, timeout: float = 180.0) -> Iterator[dict]:
    """``qonnect testbed up --dir directory ARGS``; yields the federation document. Always taken
    down again; if ``down`` fails, the testbed's process is killed by the pid it recorded."""
    try:
        run_qonnect("testbed", "up", "--dir", str(directory), *args, timeout=timeout)
        yield yaml.safe_load((directory / "federation.yaml").read_text())
    finally:
        pid_file = directory / "testbed.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        down = ("testbed", "down", "--dir", str(directory))
        try:
            stopped = run_qonnect(*down, check=False, timeout=120).returncode == 0
        except subprocess.TimeoutExpired:
            stopped = False
        if not stopped and pid is not None:  # its process group: the kube engine's components too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def create_token(
    db: str, role: str, *, name: str | None = None, cluster: str | None = None, path: Path | None = None
) -> str:
    """``qonnect kb token create`` against the KB database; written 0600 to ``path`` if given."""
    args = ["kb", "token", "create", "--db", db, "--role", role]
    args += ["--name", name] if name else []
    args += ["--cluster", cluster] if cluster else []
    token = run_qonnect(*args).stdout.strip()
    if path is not None:
        path.write_text(token + "\n")
        path.chmod(0o600)
    return token


def serve_kb(
    db: str, base: Path, *args: str, procs: list[subprocess.Popen], tls: tuple[Path, Path] | None = None
) -> str:
    """``qonnect kb serve`` on a port the system picks (read back from its port file); the
    process joins ``procs`` for the caller to stop. Returns the KB's URL once it is listening."""
    port_file = base / "kb.port"
    port_file.unlink(missing_ok=True)
    cmd = ["kb", "serve", "--db", db, "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
    if tls:
        cmd += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
    proc = start_process([*qonnect_cmd(), *cmd, *args], base / "kb.log")
    procs.append(proc)

    def port() -> str:
        assert proc.poll() is None, f"the KB exited ({proc.returncode}); see {base / 'kb.log'}"
        return port_file.exists() and port_file.read_text().strip()

    return f"{'https' if tls else 'http'}://127.0.0.1:{wait_for(port, 60, 'the KB port file')}"


@dataclass
class Reporting:
    """A KB with every testbed cluster registered and an agent reporting each."""

    base: Path
    db: str
    url: str
    admin_token_file: Path
    clusters: dict[str, dict]
    ca: Path | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def admin_token(self) -> str:
        return self.admin_token_file.read_text().strip()

    def kb(self, token: str | None = None):
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        return KBClient(self.url, token or self.admin_token, ca_path=str(self.ca) if self.ca else None)


@contextlib.contextmanager
def reporting_federation(
    base: Path,
    *testbed_args: str,
    tls: tuple[Path, Path, Path] | None = None,
    interval: float = 2,
    kb_args: tuple[str, ...] = (),
    timeout: float = 90,
) -> Iterator[Reporting]:
    """The testbed of ``testbed_args`` with its clusters registered in a KB and reporting to it
    through one agent each; ``tls`` = (certificate, key, CA bundle) serves the KB over HTTPS."""
    procs: list[subprocess.Popen] = []
    try:
        with started_testbed(base / "testbed", *testbed_args) as doc:
            db = f"sqlite:///{base / 'kb.sqlite'}"
            admin = base / "admin.token"
            create_token(db, "admin", name="admin", path=admin)
            url = serve_kb(db, base, *kb_args, procs=procs, tls=tls[:2] if tls else None)
            fed = Reporting(
                base, db, url, admin, {c["name"]: c for c in doc["clusters"]}, tls[2] if tls else None, procs
            )
            _start_agents(fed, interval)
            _wait_reporting(fed, timeout)
            yield fed
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def _start_agents(fed: Reporting, interval: float) -> None:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

    kb = fed.kb()
    wait_for(kb.healthz, 60, "the KB to answer /healthz", retry_on=(KBError,))
    for name, c in fed.clusters.items():
        kb.register_cluster(registration(c))
        token = fed.base / f"agent-{name}.token"
        create_token(fed.db, "agent", name=f"agent-{name}", cluster=name, path=token)
        cmd = [*qonnect_cmd(), "agent", "--cluster", name, "--kubeconfig", c["kubeconfig"], "--kb", fed.url]
        cmd += ["--kb-ca", str(fed.ca)] if fed.ca else []
        cmd += ["--token-file", str(token), "--interval", f"{interval:g}"]
        cmd += ["--state-dir", str(fed.base / f"agent-{name}")]
        fed.procs.append(start_process(cmd, fed.base / f"agent-{name}.log"))


def _wait_reporting(fed: Reporting, timeout: float) -> None:
    kb = fed.kb()

    def all_reporting() -> bool:
        inv = kb.inventory()
        return len(inv["clusters"]) == len(fed.clusters) and all(
            c["healthy"] and c["nodes"] for c in inv["clusters"]
        )

    try:
        wait_for(all_reporting, timeout, f"all {len(fed.clusters)} agents to report")
    except AssertionError as exc:
        logs = "".join(
            f"\n--- {log.name}:\n" + log.read_text(errors="replace")[-1500:]
            for log in sorted(fed.base.glob("*.log"))
        )
        raise AssertionError(f"{exc}; process logs:{logs}") from None
