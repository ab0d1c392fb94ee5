"""Three real RaftNode replicas, each its own process (``_raft_replica.py``), for the tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support import free_ports

HERE = Path(__file__).parent
DIVERGED = "state machine may have diverged"


class Cluster:
    def __init__(self, root: Path, size: int = 3) -> None:
        self.root = root
        self.ctl = root / "ctl"
        self.ctl.mkdir(parents=True)
        self.secret = root / "secret"
        self.secret.write_text(os.urandom(24).hex())
        self.secret.chmod(0o600)
        self.ports = free_ports(size)
        self.addrs = [f"127.0.0.1:{p}" for p in self.ports]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, list[Path]] = {p: [] for p in self.ports}
        self.stopped: set[int] = set()

    def start(self, port: int) -> None:
        log = self.root / f"replica-{port}-{len(self.logs[port])}.log"
        self.logs[port].append(log)
        (self.ctl / f"{port}.json").unlink(missing_ok=True)
        with log.open("wb") as err:
            self.procs[port] = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "_raft_replica.py"),
                    f"127.0.0.1:{port}",
                    ",".join(self.addrs),
                    str(self.root / f"data-{port}"),
                    str(self.secret),
                    str(self.ctl),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def view(self, port: int) -> dict[str, Any] | None:
        try:
            view = json.loads((self.ctl / f"{port}.json").read_text())
        except (OSError, ValueError):
            return None
        proc = self.procs.get(port)
        if proc is None or proc.poll() is not None or view.get("pid") != proc.pid:
            return None
        return view

    def leader(self) -> int | None:
        for port in self.ports:
            view = self.view(port)
            if view and view["is_leader"] and port not in self.stopped:
                return port
        return None

    def wait_leader(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.leader()
            if port is not None:
                return port
            time.sleep(0.05)
        raise AssertionError(f"no leader within {timeout}s:\n{self.tails()}")

    def pause(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGSTOP)
        self.stopped.add(port)

    def resume(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGCONT)
        self.stopped.discard(port)

    def slow(self, port: int, delay: float) -> None:
        """Delay the replica's answers to appends by ``delay`` seconds (0: no longer)."""
        path = self.ctl / f"slow-{port}"
        if delay > 0:
            path.write_text(str(delay))
        else:
            path.unlink(missing_ok=True)

    def kill(self, port: int) -> None:
        self.procs[port].kill()
        self.procs[port].wait()
        self.stopped.discard(port)

    def converged(self) -> list[dict[str, Any]] | None:
        views = [self.view(p) for p in self.ports]
        if not all(views):
            return None
        first = views[0]
        assert first is not None
        same = all(v and (v["applied"], v["digest"]) == (first["applied"], first["digest"]) for v in views)
        return views if same and first["applied"] == first["commit"] else None  # type: ignore[return-value]

    def diverged(self) -> list[str]:
        return [
            f"{log.name}: {line}"
            for logs in self.logs.values()
            for log in logs
            for line in log.read_text(errors="replace").splitlines()
            if DIVERGED in line or "CRITICAL" in line
        ]

    def tails(self) -> str:
        out = []
        for logs in self.logs.values():
            for log in logs[-1:]:
                out.append(
                    f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                )
        return "\n".join(out)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def busy_children(count: int) -> list[subprocess.Popen[bytes]]:
    """CPU-bound processes at normal priority, like migrations' ansible-playbook workers."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _i in range(count)]
