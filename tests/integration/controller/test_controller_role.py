"""Role qonnect.core.controller: a supervised replica runs and leads its (one-replica) group;
idempotent; no secret in the output; files 0600; absent stops and removes it. Groups of three
are tested with the same command line in test_controller_raft.py."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import urllib.request
from pathlib import Path

import pytest
from _controller_stack import BIN, Stack, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SECRET = "vaulted-raft-secret-0123456789abcdef-0123"

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: One replica
      ansible.builtin.include_role:
        name: qonnect.core.controller
      vars:
        controller_id: r0
        controller_raft_address: "{{ raft[0] }}"
        controller_http: "{{ http[0] }}"
"""


def _play(stack: Stack, playbook: Path, extra: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        timeout=180,
        env=stack.env,
        check=False,
    )


def _recap_changed(out: str) -> int:
    match = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", out)
    assert match, out[-3000:]
    return int(match.group(1))


def _status(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url + "/status", timeout=2) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def test_role_runs_a_replica_idempotently(stack: Stack, tmp_path: Path):
    stack.start_kb()
    raft = [f"127.0.0.1:{free_port()}"]
    http = [f"127.0.0.1:{free_port()}"]
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    base = tmp_path / "qonnect"
    extra = {
        "raft": raft,
        "http": http,
        "controller_peers": raft,
        "controller_raft_secret": SECRET,
        "controller_kb_url": stack.kb_url,
        "controller_kb_token": stack.token("controller"),
        "controller_base_dir": str(base),
        "controller_python": str(BIN / "python"),
        "controller_service_manager": "process",
        "controller_stop_timeout": 10,
    }
    try:
        first = _play(stack, playbook, extra)
        assert first.returncode == 0, first.stdout[-4000:]
        assert SECRET not in first.stdout + first.stderr and extra["controller_kb_token"] not in first.stdout
        urls = [f"http://{h}" for h in http]
        wait_for(lambda: any((s := _status(u)) and s["is_leader"] for u in urls), 30, what="a leader")
        home = base / "controller-r0"
        for name in ("raft.secret", "kb.token"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert (home / "controller.pid").exists() and (home / "controller.log").exists()
        assert (home / "data" / "raft.journal").exists()
        second = _play(stack, playbook, extra)
        assert second.returncode == 0 and _recap_changed(second.stdout) == 0, second.stdout[-3000:]
    finally:
        gone = _play(stack, playbook, dict(extra, controller_state="absent"))
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert not (base / "controller-r0").exists()
    assert all(_status(f"http://{h}") is None for h in http)


def test_role_refuses_a_missing_secret(stack: Stack, tmp_path: Path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    raft = ["127.0.0.1:1"]
    out = _play(
        stack,
        playbook,
        {
            "raft": raft,
            "http": raft,
            "controller_peers": raft,
            "controller_kb_url": "http://127.0.0.1:9",
            "controller_kb_token": "t",
            "controller_base_dir": str(tmp_path / "q"),
            "controller_python": str(BIN / "python"),
            "controller_service_manager": "process",
        },
    )
    assert out.returncode != 0 and "controller_raft_secret (at least 32 characters)" in out.stdout
    assert not (tmp_path / "q").exists()
