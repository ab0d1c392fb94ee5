"""Helpers and fixtures of the Ansible integration tests: a real federation: the paper testbed, a KB, one agent per cluster.

Everything runs as real processes (`qonnect testbed up`, `qonnect kb serve`, `qonnect agent`);
the tests drive it with real `ansible-playbook`, `ansible-inventory` and ansible-runner and
read the clusters back through the Kubernetes API. Every process started here is stopped at the
end of the session, also when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
QONNECT = str(BIN / "qonnect")
COLLECTIONS = str(ROOT / ".venv" / "collections")
CLUSTERS = [f"{tier}-{i}" for tier in ("cloud", "fog", "edge") for i in (1, 2, 3)]


@dataclass
class Federation:
    dir: Path
    kb_url: str
    admin_token_file: Path
    clusters: dict[str, dict]
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """Environment for ansible commands: collection path and KB URL; the token stays in a file."""
        env = dict(os.environ)
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
            QONNECT_KB_URL=self.kb_url,
            ANSIBLE_HOST_KEY_CHECKING="False",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCALHOST_WARNING="False",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        )
        env.pop("QONNECT_KB_TOKEN", None)
        return env

    def kb(self):
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        return KBClient(self.kb_url, self.admin_token_file.read_text().strip())

    def playbook(self, name: str, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
        cmd = [str(BIN / "ansible-playbook"), name, "-e", f"kb_token_file={self.admin_token_file}", *args]
        return subprocess.run(
            cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )

    def qonnect(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([QONNECT, *args], capture_output=True, text=True, timeout=60, check=True)


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    """The PLAY RECAP counters of localhost, failing with the output when the run failed."""
    found = re.search(r"localhost\s+:\s+(.*)", result.stdout)
    assert found, result.stdout + result.stderr
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}
    return counts


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


def start_process(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def create_token(db: str, role: str, path: Path, cluster: str | None = None) -> Path:
    args = [QONNECT, "kb", "token", "create", "--db", db, "--role", role, "--name", path.stem]
    if cluster:
        args += ["--cluster", cluster]
    token = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def snapshot(k8s, namespace: str = "bookinfo") -> dict[str, dict]:
    """Per cluster: kind/name -> (labels, annotations, spec) of each object qonnect manages there.

    Status and resourceVersion are left out: the clusters' controllers update them on their own.
    """
    out: dict[str, dict] = {}
    for cluster in CLUSTERS:
        core, apps = k8s(cluster)
        objs: dict[str, str] = {}
        api = core.api_client
        for kind, items in (
            ("Namespace", [n for n in core.list_namespace().items if n.metadata.name == namespace]),
            ("Deployment", apps.list_namespaced_deployment(namespace).items),
            ("Service", core.list_namespaced_service(namespace).items),
        ):
            for obj in items:
                body = api.sanitize_for_serialization(obj)
                objs[f"{kind}/{obj.metadata.name}"] = json.dumps(
                    [body["metadata"].get("labels"), body["metadata"].get("annotations"), body.get("spec")],
                    sort_keys=True,
                )
        out[cluster] = objs
    return out


def json_out(result: subprocess.CompletedProcess) -> dict:
    """JSON output of an ansible command; strings ansible marks untrusted ({"__ansible_unsafe": s},
    as ansible-core 2.19 prints values that came from outside) become plain strings."""
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout, object_hook=lambda d: d.get("__ansible_unsafe", d) if len(d) == 1 else d)
