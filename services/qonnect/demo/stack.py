"""The demo's federation: testbed, KB, tokens, agents and controller replicas, as real processes.

Everything is started through the ``qonnect`` command line, detached (own session, so a Ctrl-C
of the demo leaves the federation running for exploration), with its log in ``DIR/logs``.
``DIR/demo.json`` records pids, URLs and file paths (never a secret), so ``qonnect demo down``
can stop exactly what ``up`` started. Tokens and the Raft secret are files of mode 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qonnect.demo.engines import ENGINES, PROFILE, Engine
from qonnect.demo.progress import StepFailed, say, wait_until

if TYPE_CHECKING:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

AGENT_INTERVAL = 2.0  # seconds between agent reports


def least_privilege(cluster: dict[str, Any], role: str) -> str:
    """The testbed's kubeconfig for a documented least-privilege identity (docs/rbac/<role>-
    clusterrole.yml): the demo's agents read with ``agent``, deploy and migrations write with ``deploy``."""
    path = cluster.get(f"{role}_kubeconfig")
    if not path:
        raise StepFailed(
            f"the testbed's federation file has no {role}_kubeconfig for cluster {cluster['name']}: "
            "restart the testbed with this version (qonnect demo down, then up)"
        )
    return str(path)


# A cluster whose agent cannot reach its API is reported unhealthy at once (reachable: false);
# this timeout only covers a silent agent. It is generous because the demo shares small, busy
# machines, where a report can arrive many seconds late and a tight timeout moves apps for nothing.
HEARTBEAT_TIMEOUT = 20.0
STATE = (
    "kb.sqlite",
    "kb.sqlite-wal",
    "kb.sqlite-shm",
    "kb.port",
    "raft.secret",
    "tokens",
    "agents",
    "controllers",
    "testbed",
    "logs",
)  # what a new `up` starts afresh
REPLICAS = 3
BINARIES_BUILD_TIMEOUT = 3600.0  # a cold Kubernetes build: 5-10 min quiet, far longer under load
# The real engine's components, as the testbed runs them (argv[0]'s name).
KUBE_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def qonnect_bin() -> list[str]:
    """The installed ``qonnect`` entry point beside this interpreter (else ``python -m qonnect``)."""
    exe = Path(sys.executable).parent / "qonnect"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "qonnect"]


def collection_root() -> Path:
    """The qonnect.core collection (playbooks, examples) as Ansible will find it."""
    from ansible_collections.qonnect import core

    return Path(next(iter(core.__path__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_secret(path: Path, value: str) -> Path:
    """Write a token or secret to a file created with mode 0600 (never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    os.chmod(path, 0o600)
    return path


def _is_ours(pid: int) -> bool:
    """True when pid is still a qonnect process (not a recycled pid of something else)."""
    try:
        return b"qonnect" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Stack:
    """The processes of one demo directory."""

    def __init__(self, root: Path, engine: str | None = None) -> None:
        """``engine`` for a new demo; None keeps the one recorded in DIR/demo.json."""
        self.root = root.resolve()
        self.logs = self.root / "logs"
        self.tokens = self.root / "tokens"
        self.testbed_dir = self.root / "testbed"
        self.state_file = self.root / "demo.json"
        self.collection = collection_root()
        collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(self.collection.parents[2])
        bindir = str(Path(sys.executable).parent)
        self.env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=collections,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        self.state: dict[str, Any] = {
            "pids": {},
            "replicas": [],
            "kb_url": "",
            "testbed": False,
            "engine": "emulator",
        }
        if self.state_file.exists():
            self.state.update(json.loads(self.state_file.read_text()))
        if engine is not None:
            self.state["engine"] = engine
        self.engine: Engine = ENGINES[self.state["engine"]]
        self.federation: dict[str, Any] = {}
        self._admin: KBClient | None = None

    @property
    def admin(self) -> KBClient:
        """The KB client with the admin token (once ``start_kb`` has made one)."""
        if self._admin is None:
            raise RuntimeError("the demo's KB is not started: no admin client yet")
        return self._admin

    # -- bookkeeping ---------------------------------------------------------------------------

    def save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        os.replace(tmp, self.state_file)

    def running(self) -> list[str]:
        """Names of recorded processes that are still alive (and the testbed, if it runs)."""
        alive = [name for name, pid in self.state["pids"].items() if _is_ours(pid)]
        with contextlib.suppress(OSError, ValueError):
            if _is_ours(int((self.testbed_dir / "testbed.pid").read_text())):
                alive.append("testbed")
        return alive

    def reset(self) -> None:
        """Forget a previous run's state (database, tokens, logs), so `up` starts afresh."""
        for name in STATE:
            path = self.root / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        self.state.update(pids={}, replicas=[], kb_url="", testbed=False)
        self.save()

    def spawn(self, name: str, args: list[str]) -> int:
        """Start ``qonnect ARGS`` detached, logging to logs/NAME.log; record its pid."""
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                qonnect_bin() + args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
                cwd=self.root,
            )
        self.state["pids"][name] = proc.pid
        self.save()
        return proc.pid

    def qonnect(self, *args: str, timeout: float = 180) -> str:
        """Run a short ``qonnect`` command; its stdout (which may hold a token: never printed)."""
        done = subprocess.run(
            qonnect_bin() + list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            raise StepFailed(f"qonnect {' '.join(args[:2])} failed: {done.stderr.strip()[-800:]}")
        return done.stdout

    def testbed(self, *args: str) -> None:
        self.qonnect("testbed", *args, "--dir", str(self.testbed_dir), timeout=self.engine.testbed_control)

    # -- start-up ------------------------------------------------------------------------------

    def start_testbed(self) -> None:
        import yaml

        engine = self.engine
        say(
            f"starting the testbed ({engine.name}): profile {PROFILE}, three cloud, three fog and three "
            f"edge clusters; {engine.what}"
        )
        if engine.name == "kube":
            self.kube_binaries()
        self.state["testbed"] = True
        self.save()
        started = time.monotonic()
        self.qonnect(
            "testbed",
            "up",
            "--engine",
            engine.name,
            "--profile",
            PROFILE,
            "--dir",
            str(self.testbed_dir),
            "--start-delay",
            str(engine.start_delay),
            "--heartbeat",
            str(AGENT_INTERVAL),
            "--timeout",
            str(engine.testbed_up),
            timeout=engine.testbed_up + 30,
        )
        self.federation = yaml.safe_load((self.testbed_dir / "federation.yaml").read_text())
        names = ", ".join(c["name"] for c in self.federation["clusters"])
        say(f"  testbed up in {time.monotonic() - started:.1f}s: {names}")

    def kube_binaries(self) -> None:
        """The real engine's binaries, built once into their cache (minutes) if missing there,
        by the testbed's own command (the product does not import the testbed)."""
        say("  Kubernetes binaries: building them once if missing (make kube; cached outside the checkout)")
        where = self.qonnect("testbed", "binaries", timeout=BINARIES_BUILD_TIMEOUT).strip()
        say(f"  Kubernetes binaries: {where}")

    def start_kb(self) -> None:
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        db = f"sqlite:///{self.root / 'kb.sqlite'}"
        port_file = self.root / "kb.port"
        port_file.unlink(missing_ok=True)
        say("starting the Knowledge Base (SQLite in the demo directory)")
        self.spawn(
            "kb",
            [
                "kb",
                "serve",
                "--db",
                db,
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--heartbeat-timeout",
                str(HEARTBEAT_TIMEOUT),
            ],
        )
        port = wait_until(
            lambda: (port_file.exists() and port_file.read_text().strip(), "not listening yet"),
            60,
            "the KB to listen",
        )
        self.state["kb_url"] = f"http://127.0.0.1:{port}"
        self.save()
        admin = self.qonnect(
            "kb", "token", "create", "--db", db, "--role", "admin", "--name", "demo-admin"
        ).strip()
        write_secret(self.tokens / "admin.token", admin)
        self._admin = KBClient(self.state["kb_url"], admin)
        wait_until(lambda: (self.admin.healthz(), "starting"), 60, "the KB /healthz")
        for role in ("controller", "reader"):
            self.make_token(role)
        say(
            f"  KB at {self.state['kb_url']}; tokens (admin, controller, reader) in {self.tokens} (mode 0600)"
        )

    def make_token(self, role: str, cluster: str | None = None) -> Path:
        body = {"role": role, "name": f"demo-{cluster or role}", **({"cluster": cluster} if cluster else {})}
        token = self.admin.request("POST", "/api/v1/tokens", body)["token"]
        return write_secret(self.tokens / (f"agent-{cluster}.token" if cluster else f"{role}.token"), token)

    def start_agents(self) -> None:
        clusters = self.federation["clusters"]
        say(
            f"starting {len(clusters)} Resource Agents (one per cluster, every {AGENT_INTERVAL:g}s, "
            "measuring latency from the cluster's own address)"
        )
        for c in clusters:
            peers = ",".join(f"{p['name']}={p['server']}" for p in clusters if p["name"] != c["name"])
            self.spawn(
                f"agent-{c['name']}",
                [
                    "agent",
                    "--cluster",
                    c["name"],
                    "--kubeconfig",
                    least_privilege(c, "agent"),
                    "--kb",
                    self.state["kb_url"],
                    "--token-file",
                    str(self.make_token("agent", c["name"])),
                    "--interval",
                    str(AGENT_INTERVAL),
                    "--source-address",
                    c["address"],
                    "--peers",
                    peers,
                    "--state-dir",
                    str(self.root / "agents" / c["name"]),
                ],
            )

        def all_healthy() -> tuple[bool, str]:
            clusters = self.admin.inventory()["clusters"]
            up = [c["name"] for c in clusters if c.get("healthy")]
            return len(up) == len(
                self.federation["clusters"]
            ), f"{len(up)}/{len(self.federation['clusters'])} healthy"

        wait_until(all_healthy, self.engine.agents_healthy, "every cluster to report healthy")
        say("  every cluster reports healthy")

    def start_controllers(self) -> None:
        secret = write_secret(self.root / "raft.secret", secrets.token_hex(32))
        addresses = [f"127.0.0.1:{free_port()}" for _replica in range(REPLICAS)]
        say(
            f"starting {REPLICAS} controller replicas (Raft {', '.join(addresses)}; shared secret {secret.name}, 0600)"
        )
        self.state["replicas"] = [
            {"id": f"c{i + 1}", "raft": a, "peers": addresses} for i, a in enumerate(addresses)
        ]
        for replica in self.state["replicas"]:
            self.start_replica(replica, secret)
        for replica in self.state["replicas"]:
            self.wait_replica(replica)
        leader = wait_until(lambda: (self.leader(), "election in progress"), 60, "a controller leader")
        say(f"  replicas serving; leader {leader['id']} (term {leader['status']['term']})")

    def start_replica(self, replica: dict[str, Any], secret: Path | None = None) -> None:
        ready = self.root / "controllers" / f"{replica['id']}.ready"
        ready.unlink(missing_ok=True)
        self.spawn(
            f"controller-{replica['id']}",
            [
                "-v",
                "controller",
                "run",
                "--id",
                replica["id"],
                "--self",
                replica["raft"],
                "--peers",
                ",".join(replica["peers"]),
                "--kb",
                self.state["kb_url"],
                "--token-file",
                str(self.tokens / "controller.token"),
                "--raft-secret-file",
                str(secret or self.root / "raft.secret"),
                "--data-dir",
                str(self.root / "controllers" / replica["id"]),
                "--http",
                "127.0.0.1:0",
                "--ready-file",
                str(ready),
                "--agent-interval",
                str(AGENT_INTERVAL),
                "--heartbeat-timeout",
                str(HEARTBEAT_TIMEOUT),
            ],
        )

    def wait_replica(self, replica: dict[str, Any]) -> None:
        ready = self.root / "controllers" / f"{replica['id']}.ready"
        wait_until(
            lambda: (ready.exists() and ready.read_text(), "starting"),
            60,
            f"replica {replica['id']} to serve",
        )
        replica["http"] = f"http://127.0.0.1:{json.loads(ready.read_text())['http']}"
        self.save()

    def replica_status(self, replica: dict[str, Any]) -> dict[str, Any] | None:
        import urllib.request

        if not replica.get("http") or not _is_ours(self.state["pids"].get(f"controller-{replica['id']}", -1)):
            return None
        try:
            with urllib.request.urlopen(replica["http"] + "/status", timeout=2) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def leader(self, among: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The replica that says it leads, with its status document."""
        for replica in among or self.state["replicas"]:
            status = self.replica_status(replica)
            if status and status.get("is_leader"):
                return dict(replica, status=status)
        return None

    def kill(self, name: str) -> None:
        """SIGKILL one recorded process, as a crash would."""
        pid = self.state["pids"].get(name)
        if pid and _is_ours(pid):
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    # -- playbooks -----------------------------------------------------------------------------

    def ansible(
        self, name: str, cmd: list[str], extra_env: dict[str, str] | None = None, timeout: float = 300
    ) -> str:
        """Run an Ansible command, logging to logs/NAME.log; a progress line every few seconds
        (the task it is on). Raises StepFailed with the log's tail when it fails."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{name}.log"
        exe = Path(sys.executable).parent / cmd[0]
        argv = [str(exe) if exe.exists() else shutil.which(cmd[0]) or cmd[0], *cmd[1:]]
        say(f"  $ {' '.join(cmd)}")
        started = time.monotonic()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env, **(extra_env or {})),
                cwd=self.root,
            )
            try:
                while True:
                    try:
                        proc.wait(timeout=3)
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() - started > timeout:
                            proc.kill()
                            proc.wait()
                            raise StepFailed(
                                f"{cmd[0]} {name} did not finish in {timeout:g}s (log {log_path})"
                            ) from None
                        tasks = [
                            line for line in log_path.read_text().splitlines() if line.startswith("TASK [")
                        ]
                        task = tasks[-1].rstrip(" *") if tasks else "starting"
                        say(f"  [{time.monotonic() - started:5.1f}s] {cmd[0]} running: {task}")
            finally:
                if proc.poll() is None:
                    proc.kill()
        output = log_path.read_text()
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-15:])
            raise StepFailed(f"{cmd[0]} {name} failed (rc {proc.returncode}, log {log_path}):\n{tail}")
        say(
            f"  {cmd[0]} finished in {time.monotonic() - started:.1f}s (log {log_path.relative_to(self.root)})"
        )
        return output

    def playbook(self, name: str, playbook: str, **extra: str) -> str:
        args = [
            "ansible-playbook",
            f"qonnect.core.{playbook}",
            "-e",
            f"kb_url={self.state['kb_url']}",
            "-e",
            f"kb_token_file={self.tokens / 'admin.token'}",
        ]
        for key, value in extra.items():
            args += ["-e", f"{key}={value}"]
        return self.ansible(name, args)

    def register_clusters(self) -> None:
        """The KB holds each cluster with the deploy identity's kubeconfig (what deploy and the
        controller's migrations use), never the testbed's admin one."""
        import yaml

        say("registering the clusters with the KB (least privilege: docs/rbac/deploy-clusterrole.yml)")
        clusters = [dict(c, kubeconfig=least_privilege(c, "deploy")) for c in self.federation["clusters"]]
        listing = self.root / "clusters.yaml"
        listing.write_text(yaml.safe_dump({"clusters": clusters}))
        self.playbook("register-clusters", "register_clusters", federation_file=str(listing))

    # -- shutdown ------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every recorded process (SIGTERM, then SIGKILL) and the testbed; what was stopped."""
        pids = {name: pid for name, pid in self.state["pids"].items() if _is_ours(pid)}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_is_alive(pid) for pid in pids.values()):
            time.sleep(0.2)
        for pid in pids.values():
            if _is_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        stopped = sorted(pids)
        if self.state.get("testbed") and (self.testbed_dir / "testbed.json").exists():
            try:
                self.testbed("down")
            except (StepFailed, subprocess.SubprocessError, OSError):
                pid_file = self.testbed_dir / "testbed.pid"
                with contextlib.suppress(OSError, ValueError):
                    pid = int(pid_file.read_text())
                    if _is_ours(pid):
                        os.kill(pid, signal.SIGKILL)
            stopped.append("testbed")
        strays = self.kube_strays()
        for pid in strays:  # the testbed's children die with it; this is the safety net
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if strays:
            stopped.append(f"{len(strays)} stray control-plane process(es)")
        self.state.update(pids={}, testbed=False)
        self.save()
        return stopped

    def kube_strays(self) -> list[int]:
        """Pids of real-engine components (etcd, kube-*) still running from this demo's testbed."""
        marker = str(self.testbed_dir).encode() + b"/"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if Path(argv[0].decode(errors="replace")).name in KUBE_COMPONENTS and any(
                marker in arg for arg in argv
            ):
                found.append(int(entry.name))
        return [pid for pid in found if _is_alive(pid)]


def _is_alive(pid: int) -> bool:
    """Alive and not a zombie (a detached child of an exited parent is reaped by init)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return status != "Z"
