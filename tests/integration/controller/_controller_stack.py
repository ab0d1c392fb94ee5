"""A real qonnect federation for the controller tests and benchmarks/failover.py.

Everything runs as real processes started through the ``qonnect`` command line: the testbed
(emulated clusters), the KB, one Resource Agent per cluster, and N controller replicas. Every
process is tracked and killed by its pid in ``close()`` (also on failure), the testbed is
stopped with ``testbed down`` and, failing that, by its recorded pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import support
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from support import free_port, qonnect_cmd
from support.federation import registration

__all__ = ["BIN", "REPO", "Stack", "free_port", "qonnect_cmd", "small_app", "wait_for"]

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable
BIN = Path(PY).parent


def wait_for(predicate: Any, timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    """support.wait_for with this harness's positional order (timeout, interval, what)."""
    return support.wait_for(predicate, timeout, what, interval=interval)


def wait_run_recorded(stack: Stack, app: str, after: int, kind: str, timeout: float = 30) -> None:
    """Until the KB records a controller run of a ``kind`` decision on ``app`` (since event
    ``after``) as succeeded: a test that ends earlier leaves the decision unfinished in the KB,
    and the next test's fresh replicas re-decide it."""
    from qonnect.controller import journal

    wait_for(
        lambda: any(
            e["type"] == journal.SUCCEEDED and e.get("reason") == kind
            for e in stack.events(app)
            if e["id"] > after and journal.trusted(e)
        ),
        timeout,
        0.5,
        f"the {kind} run recorded",
    )


def small_app(
    name: str, revision: str = "1", image: str = "nginx", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """An Application of one service, one Deployment of one 10m-CPU container (``revision`` in
    its environment: a new value is a new spec version), for tests and benchmarks that need
    many applications on a small fleet."""
    container = {
        "name": "web",
        "image": image,
        "env": [{"name": "REVISION", "value": revision}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", **({"annotations": annotations} if annotations else {})},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}},
        },
    }
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {"services": [{"name": "web", "manifests": [deployment]}]},
    }


def spread_app(name: str, back: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """front (cloud, one replica) calls back, whose two replicas are spread over two clusters
    (``back``: the back service's placement fields, e.g. a tier or constraints; ``spec``: more
    fields of the application's spec)."""

    def objects(svc: str) -> list[dict[str, Any]]:
        labels = {"app": svc}
        container = {
            "name": svc,
            "image": "nginx",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": svc},
                "spec": {"ports": [{"port": 80}], "selector": labels},
            },
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": svc},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                },
            },
        ]

    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "services": [
                {"name": "front", "tier": "cloud", "dependsOn": ["back"], "manifests": objects("front")},
                {"name": "back", "replicas": 2, "spread": 2, **back, "manifests": objects("back")},
            ],
        },
    }


class Replica:
    """One `qonnect controller run` process."""

    def __init__(
        self,
        stack: Stack,
        index: int,
        raft: str,
        peers: list[str],
        options: list[str],
        prefix: list[str] | None = None,
        http_bind: str | None = None,
    ) -> None:
        self.stack, self.index, self.raft, self.peers = stack, index, raft, peers
        self.name = f"g{stack.generation}r{index}"
        self.options = options
        self.prefix = prefix or []  # e.g. ["ip", "netns", "exec", NS]
        self.http_bind = http_bind or f"{raft.rsplit(':', 1)[0]}:0"
        self.data_dir = stack.root / f"controller-{self.name}"
        self.ready = stack.root / f"controller-{self.name}.ready"
        self.log_path = stack.root / f"controller-{self.name}.log"
        self.proc: subprocess.Popen | None = None
        self.http = ""
        self.relayed = False

    def start(self, wait: bool = True) -> Replica:
        self.ready.unlink(missing_ok=True)
        cmd = self.prefix + qonnect_cmd(
            "-v",
            "controller",
            "run",
            "--id",
            self.name,
            "--self",
            self.raft,
            "--peers",
            ",".join(self.peers),
            "--kb",
            self.stack.kb_url,
            "--token-file",
            str(self.stack.controller_token),
            "--raft-secret-file",
            str(self.stack.secret),
            "--data-dir",
            str(self.data_dir),
            "--http",
            self.http_bind,
            "--ready-file",
            str(self.ready),
            *self.options,
        )
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.stack.env
        )
        log.close()
        self.stack.procs.append(self.proc)
        if wait:
            self.wait_serving()
        return self

    def wait_serving(self) -> None:
        wait_for(self.ready.exists, 30, what=f"replica {self.name} to serve")
        if not self.relayed:  # a relayed replica's status URL is the relay's, set by the test
            port = json.loads(self.ready.read_text())["http"]
            self.http = f"http://{self.http_bind.rsplit(':', 1)[0]}:{port}"

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return bool(self.proc and self.proc.poll() is None)

    def status(self, timeout: float = 2.0) -> dict[str, Any] | None:
        if not self.alive() or not self.http:
            return None
        try:
            with urllib.request.urlopen(self.http + "/status", timeout=timeout) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Stack:
    """Testbed + KB + agents + controller replicas under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.replicas: list[Replica] = []
        self.generation = 0  # bumped by stop_replicas: a new group gets fresh names and data dirs
        self.kb_url = ""
        self.admin: KBClient | None = None
        self.testbed_dir = root / "testbed"
        self.federation: dict[str, Any] = {}
        self.agents: dict[str, subprocess.Popen] = {}
        self.env = dict(
            os.environ,
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            ANSIBLE_COLLECTIONS_PATH=str(REPO / ".venv" / "collections"),
        )
        self.secret = root / "raft.secret"
        self.secret.write_text(os.urandom(24).hex())
        self.secret.chmod(0o600)

    # -- KB ------------------------------------------------------------------------------------

    def start_kb(self, heartbeat_timeout: float = 15.0, port: int = 0) -> KBClient:
        db = f"sqlite://{self.root / 'kb.sqlite'}"
        port_file = self.root / "kb.port"
        port_file.unlink(missing_ok=True)
        log = open(self.root / "kb.log", "ab")  # noqa: SIM115 - owned by the process
        proc = subprocess.Popen(
            qonnect_cmd(
                "kb",
                "serve",
                "--db",
                db,
                "--port",
                str(port),
                "--port-file",
                str(port_file),
                "--heartbeat-timeout",
                str(heartbeat_timeout),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        log.close()
        self.procs.append(proc)
        self.kb_proc, self.kb_heartbeat_timeout = proc, heartbeat_timeout
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 30, what="the KB port")
        self.kb_url = f"http://127.0.0.1:{port}"
        wait_for(self._kb_up, 30, what="the KB /healthz")
        if getattr(self, "admin", None) is not None:  # a restart: same database, same tokens
            return self.admin
        admin = subprocess.run(
            qonnect_cmd("kb", "token", "create", "--db", db, "--role", "admin"),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=self.env,
        ).stdout.strip()
        self.admin = KBClient(self.kb_url, admin)
        self.admin_token = self._token_file("admin", admin)
        self.controller_token = self._token_file("controller", self.token("controller"))
        return self.admin

    def stop_kb(self) -> None:
        """SIGKILL the KB, as a crash or a lost host would."""
        if self.kb_proc.poll() is None:
            os.kill(self.kb_proc.pid, signal.SIGKILL)
            self.kb_proc.wait(timeout=10)

    def restart_kb(self) -> None:
        """The KB back on the same port with the same database."""
        self.start_kb(self.kb_heartbeat_timeout, int(self.kb_url.rsplit(":", 1)[1]))

    def _kb_up(self) -> bool:
        try:
            KBClient(self.kb_url, None, timeout=2).healthz()
        except KBError:
            return False
        return True

    def token(self, role: str, cluster: str | None = None) -> str:
        body = {"role": role, **({"cluster": cluster} if cluster else {})}
        return self.admin.request("POST", "/api/v1/tokens", body)["token"]

    def _token_file(self, name: str, token: str) -> Path:
        path = self.root / f"{name}.token"
        path.write_text(token)
        path.chmod(0o600)
        return path

    # -- testbed and agents --------------------------------------------------------------------

    def start_testbed(
        self,
        clusters: int | None = 6,
        heartbeat: float = 1.0,
        engine: str = "emulator",
        profile: str = "paper",
        start_delay: float = 0.3,
    ) -> dict[str, Any]:
        """``qonnect testbed up``: emulated clusters by default; ``engine="kube"`` starts real
        control planes (slower: up to 10 minutes on a loaded machine)."""
        import yaml

        subprocess.run(
            qonnect_cmd(
                "testbed",
                "up",
                "--dir",
                str(self.testbed_dir),
                "--profile",
                profile,
                *(["--clusters", str(clusters)] if clusters else []),
                "--start-delay",
                str(start_delay),
                "--heartbeat",
                str(heartbeat),
                "--engine",
                engine,
                *(["--timeout", "600"] if engine == "kube" else []),
            ),
            check=True,
            capture_output=True,
            timeout=120 if engine == "emulator" else 900,
            env=self.env,
        )
        self.federation = yaml.safe_load((self.testbed_dir / "federation.yaml").read_text())
        for c in self.federation["clusters"]:  # with the nodes' economics, as an admin registers them
            record = {k: v for k, v in registration(c).items() if k != "name"}
            self.admin.request(
                "PUT", f"/api/v1/clusters/{c['name']}", record | {"labels": c.get("labels") or {}}
            )
        return self.federation

    def testbed(self, *args: str) -> None:
        subprocess.run(
            qonnect_cmd("testbed", *args, "--dir", str(self.testbed_dir)),
            check=True,
            capture_output=True,
            timeout=60,
            env=self.env,
        )

    def start_agents(self, interval: float = 1.0) -> None:
        for c in self.federation["clusters"]:
            token = self._token_file(f"agent-{c['name']}", self.token("agent", c["name"]))
            log = open(self.root / f"agent-{c['name']}.log", "ab")  # noqa: SIM115 - owned by the process
            proc = subprocess.Popen(
                qonnect_cmd(
                    "agent",
                    "--cluster",
                    c["name"],
                    "--kubeconfig",
                    c["kubeconfig"],
                    "--kb",
                    self.kb_url,
                    "--token-file",
                    str(token),
                    "--interval",
                    str(interval),
                    "--state-dir",
                    str(self.root / f"agent-{c['name']}"),
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
            )
            log.close()
            self.procs.append(proc)
            self.agents[c["name"]] = proc
        wait_for(
            lambda: all(c["healthy"] for c in self.admin.inventory()["clusters"]),
            60,
            what="every cluster to report healthy",
        )

    def deploy(self, spec: str | Path, timeout: float = 180, **extra: object) -> dict[str, Any]:
        """The user's deploy: playbooks/deploy.yml with the admin token (and any other -e
        variables, e.g. ``min_ready_seconds``)."""
        variables = {
            "app_file": str(spec),
            "kb_url": self.kb_url,
            "kb_token_file": str(self.admin_token),
            "wait_timeout": 60,
            **extra,
        }
        result = subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                str(REPO / "playbooks" / "deploy.yml"),
                "-e",
                json.dumps(variables),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=self.root,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"deploy failed:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}")
        return self.placement(self._app_name(spec))

    @staticmethod
    def _app_name(spec: str | Path) -> str:
        import yaml

        return yaml.safe_load(Path(spec).read_text())["metadata"]["name"]

    # -- controller replicas -------------------------------------------------------------------

    def start_replicas(
        self,
        n: int = 3,
        options: list[str] | None = None,
        addresses: list[str] | None = None,
        prefixes: list[list[str]] | None = None,
        http_binds: list[str] | None = None,
        status_urls: list[str] | None = None,
    ) -> list[Replica]:
        """Start n replicas (optionally inside network namespaces via prefixes) and wait for them."""
        addresses = addresses or [f"127.0.0.1:{free_port()}" for _replica in range(n)]
        for i, addr in enumerate(addresses):
            replica = Replica(
                self,
                i,
                addr,
                addresses,
                list(options or []),
                prefixes[i] if prefixes else None,
                http_binds[i] if http_binds else None,
            )
            if status_urls:
                replica.http, replica.relayed = status_urls[i], True
            self.replicas.append(replica)
        for replica in self.replicas:
            replica.start(wait=False)
        for replica in self.replicas:
            replica.wait_serving()
        return self.replicas

    def stop_replicas(self) -> None:
        """SIGKILL the current group (as a crash would) and forget it."""
        for replica in self.replicas:
            replica.kill()
        self.replicas = []
        self.generation += 1

    def leader(self, among: list[Replica] | None = None) -> Replica | None:
        """The replica that reports itself leader and has committed its leader entry."""
        for replica in among or self.replicas:
            st = replica.status(timeout=1.0)
            if st and st["is_leader"]:
                return replica
        return None

    def wait_leader(self, timeout: float = 15.0, among: list[Replica] | None = None) -> Replica:
        return wait_for(lambda: self.leader(among), timeout, 0.05, "a leader")

    # -- KB views ------------------------------------------------------------------------------

    def events(self, app: str | None = None) -> list[dict[str, Any]]:
        return self.admin.list_events(application=app, limit=1000, after_id=0)

    def placement(self, app: str) -> dict[str, Any]:
        record = self.admin.get_placement(app)
        return record.get("current") or record.get("desired") or {}

    def healthy_elsewhere(self, app: str, failed: set[str]) -> bool:
        """Every service of app placed off the failed clusters and Healthy there."""
        placement = self.placement(app)
        if not placement:
            return False
        workloads = self.admin.list_workloads(application=app)
        for service, targets in placement.items():
            clusters = {t["cluster"] for t in targets}
            if clusters & failed:
                return False
            states = [
                w["status"] for w in workloads if w.get("service") == service and w["cluster"] in clusters
            ]
            if not states or any(s != "Healthy" for s in states):
                return False
        return True

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        if (self.testbed_dir / "federation.yaml").exists():
            try:
                self.testbed("down")
            except (subprocess.SubprocessError, OSError):
                pid_file = self.testbed_dir / "testbed.pid"
                if pid_file.exists():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid_file.read_text()), signal.SIGKILL)
