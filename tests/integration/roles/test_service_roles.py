"""The knowledge_base and resource_agent roles with real ansible-playbook on localhost.

Converge (the agent's reports reach the KB the role started), idempotence (changed=0), stop
(processes gone, cleanly), absent (service files gone, the KB's database kept). There is no
systemd as PID 1 here, so the roles run the services as supervised background processes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import support
from support import free_port, run_qonnect

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent

PLAYBOOK = """
- name: KB and one agent
  hosts: localhost
  gather_facts: false
  vars:
    qonnect_python: {python}
  roles:
    - role: qonnect.core.knowledge_base
      knowledge_base_state: "{{{{ state }}}}"
      knowledge_base_base_dir: {base}
      knowledge_base_port: {port}
      knowledge_base_heartbeat_timeout: 5
    - role: qonnect.core.resource_agent
      resource_agent_state: "{{{{ state }}}}"
      resource_agent_base_dir: {base}
      resource_agent_cluster: edge-1
      resource_agent_kubeconfig: {base}/edge-1.kubeconfig
      resource_agent_kb_url: http://127.0.0.1:{port}
      resource_agent_kb_token: "{{{{ lookup('file', '{base}/agent-token.txt') }}}}"
      resource_agent_interval: 0.5
"""

# a cluster whose API is down: the agent must run anyway and say so
DEAD_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: edge-1, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: agent, user: {token: not-a-real-token}}]
contexts: [{name: edge-1, context: {cluster: edge-1, user: agent}}]
current-context: edge-1
"""


# the KB may still be starting when the first check runs
wait_for = functools.partial(support.wait_for, interval=0.3, retry_on=(KBError,))


def pid_alive(pid_file: Path) -> bool:
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (ProcessLookupError, ValueError):
        return False
    return True


class Play:
    def __init__(self, root: Path, secrets: list[str]) -> None:
        self.root = root
        self.secrets = secrets
        self.timings: list[tuple[str, float]] = []
        (root / "inventory").write_text(
            'localhost ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n'
        )

    def run(self, state: str) -> dict[str, int]:
        """Run the play with ``state``; it must succeed; returns the recap counts."""
        returncode, stdout, output = self.playbook(state)
        self.last_output = output
        assert returncode == 0, output[-4000:]
        recap = re.search(r"localhost\s+:\s+(.*)", stdout.split("PLAY RECAP")[-1])
        assert recap, output[-2000:]
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}

    def playbook(self, state: str) -> tuple[int, str, str]:
        """Run the play; (exit status, stdout, all output). No secret may appear in the output."""
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=str(REPO / ".venv" / "collections"),
            PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_PIPELINING="1",
            ANSIBLE_LOCAL_TEMP=str(self.root / "ansible-tmp"),
        )
        started = time.monotonic()
        proc = support.run(
            [
                str(VENV_BIN / "ansible-playbook"),
                "-i",
                "inventory",
                "play.yml",
                "-e",
                f"state={state}",
                "--diff",
            ],
            cwd=self.root,
            env=env,
            timeout=240,
            check=False,
        )
        output = proc.stdout + proc.stderr
        self.timings.append((state, round(time.monotonic() - started, 1)))
        for secret in self.secrets:
            assert secret not in output, "a token leaked into the ansible output"
        return proc.returncode, proc.stdout, output


def test_roles_converge_idempotent_stop_absent(tmp_path):
    base = tmp_path / "base"
    (base / "kb").mkdir(parents=True)
    port = free_port()
    python = sys.executable
    # the agent's token is made before the KB runs (the same CLI an operator would use)
    create = ["kb", "token", "create", "--db", f"sqlite:///{base}/kb/kb.sqlite", "--role", "agent"]
    agent_token = run_qonnect(*create, "--cluster", "edge-1").stdout.strip()
    (base / "agent-token.txt").write_text(agent_token)
    (base / "edge-1.kubeconfig").write_text(DEAD_KUBECONFIG)
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(python=python, base=base, port=port))
    play = Play(tmp_path, [agent_token])
    kb_dir, agent_dir = base / "kb", base / "agent-edge-1"
    try:
        first = play.run("started")
        assert first["failed"] == 0 and first["changed"] >= 4
        admin_file = kb_dir / "admin.token"
        admin_token = admin_file.read_text().strip()
        play.secrets.append(admin_token)
        for secret_file in (admin_file, kb_dir / "kb.env", agent_dir / "token"):
            assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600, secret_file
        assert (agent_dir / "token").read_text().strip() == agent_token
        assert pid_alive(kb_dir / "kb.pid") and pid_alive(agent_dir / "agent.pid")

        # the agent the role started reports to the KB the role started
        admin = KBClient(f"http://127.0.0.1:{port}", admin_token, timeout=5)
        assert admin.healthz()["status"] == "ok"
        admin.register_cluster({"name": "edge-1", "tier": "edge"})
        status = wait_for(
            lambda: (s := admin.get_cluster("edge-1")["status"])["reachable"] is False and s,
            60,
            "the agent's reports (cluster unreachable) in the KB",
        )
        assert "listing nodes" in status["error"]

        again = play.run("started")
        changed = [t for t in play.last_output.split("TASK [")[1:] if "\nchanged:" in t]
        assert again["changed"] == 0 and again["failed"] == 0, changed

        stopped = play.run("stopped")
        assert stopped["changed"] == 2
        assert not pid_alive(kb_dir / "kb.pid") and not pid_alive(agent_dir / "agent.pid")
        assert "stopped (" in (agent_dir / "agent.log").read_text()  # the agent's own clean exit
        with pytest.raises(KBError) as down:
            admin.healthz()
        assert down.value.status == 0
        # what the agent buffered while stopping survives in its state directory
        json.loads((agent_dir / "state" / "outbox.json").read_text())

        gone = play.run("absent")
        assert gone["changed"] >= 2 and gone["failed"] == 0
        assert not agent_dir.exists()
        assert sorted(p.name for p in kb_dir.iterdir() if not p.name.startswith("kb.sqlite")) == []
        assert (kb_dir / "kb.sqlite").exists()
    finally:
        print("ansible-playbook seconds:", play.timings)
        for script in (agent_dir / "run.sh", kb_dir / "run.sh"):
            if script.exists():
                subprocess.run([str(script), "stop"], capture_output=True, timeout=60, check=False)


def test_bad_role_arguments_are_named(tmp_path):
    (tmp_path / "play.yml").write_text(
        """
- hosts: localhost
  gather_facts: false
  roles:
    - role: qonnect.core.resource_agent
      resource_agent_state: running
      resource_agent_interval: often
"""
    )
    returncode, _stdout, message = Play(tmp_path, []).playbook("started")
    assert returncode != 0
    assert "resource_agent_cluster" in message and "resource_agent_state" in message
    assert "resource_agent_interval" in message


def test_kb_role_refuses_plain_http_beyond_loopback_unless_asked(tmp_path):
    """The KB refuses plain HTTP on a non-loopback address; the role says why, and its
    knowledge_base_insecure_listen passes the explicit opt-in."""
    port = free_port()
    base = tmp_path / "q"
    (tmp_path / "play.yml").write_text(f"""
- hosts: localhost
  gather_facts: false
  vars:
    qonnect_python: {VENV_BIN / "python"}
  roles:
    - role: qonnect.core.knowledge_base
      knowledge_base_state: "{{{{ state }}}}"
      knowledge_base_base_dir: {base}
      knowledge_base_host: 0.0.0.0
      knowledge_base_port: {port}
      knowledge_base_service_manager: process
      knowledge_base_start_timeout: 20
      knowledge_base_insecure_listen: "{{{{ insecure | default(false) }}}}"
""")
    play = Play(tmp_path, [])
    try:
        returncode, _stdout, output = play.playbook("started")
        assert returncode != 0
        assert "insecure-listen" in output or "TLS" in output, output[-3000:]
        (tmp_path / "play.yml").write_text(
            (tmp_path / "play.yml").read_text().replace('"{{ insecure | default(false) }}"', "true")
        )
        returncode, _stdout, output = play.playbook("started")
        assert returncode == 0, output[-3000:]
        assert KBClient(f"http://127.0.0.1:{port}", "x", timeout=5).healthz()["status"] == "ok"
    finally:
        play.playbook("absent")
