"""`qonnect demo`: the federation set-up it performs, and `down` stopping exactly what it started.

The five steps take minutes on a busy machine, so this test runs the demo's set-up (testbed, KB,
tokens, registration through ansible-playbook, nine agents, three replicas) with real processes
and checks what ``up`` promises before the steps start: files, permissions, health, a leader,
and that ``qonnect demo down`` leaves no process behind.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from qonnect.demo.stack import Stack, _is_ours

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QONNECT = str(Path(sys.executable).parent / "qonnect")


def down(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [QONNECT, "demo", "down", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_setup_then_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = Stack(tmp_path)
    try:
        stack.reset()
        stack.start_testbed()
        stack.start_kb()
        stack.register_clusters()
        stack.start_agents()
        stack.start_controllers()

        clusters = {c["name"]: c for c in stack.admin.list_clusters()}
        assert len(clusters) == 9
        assert {c["tier"] for c in clusters.values()} == {"cloud", "fog", "edge"}
        assert all(c["status"]["healthy"] for c in clusters.values())
        assert stack.leader() is not None
        for token in (tmp_path / "tokens").iterdir():
            assert stat.S_IMODE(token.stat().st_mode) == 0o600, token
        assert stat.S_IMODE((tmp_path / "raft.secret").stat().st_mode) == 0o600
        # the agents measure latency from their cluster's address: the KB holds the matrix
        assert any(peers for peers in stack.admin.latency().values())
        printed = capsys.readouterr().out
        for token in (tmp_path / "tokens").iterdir():
            assert token.read_text().strip() not in printed
        pids = dict(stack.state["pids"])
        assert len(pids) == 1 + 9 + 3 and all(_is_ours(pid) for pid in pids.values())
    finally:
        result = down(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "testbed" in result.stdout and "controller-c1" in result.stdout
    assert not any(_is_ours(pid) for pid in pids.values())
    assert not (tmp_path / "testbed" / "testbed.json").exists()


def test_down_without_a_demo_says_so(tmp_path: Path) -> None:
    result = down(tmp_path)
    assert result.returncode == 2
    assert "no demo state" in result.stderr and "Traceback" not in result.stderr


def test_up_refuses_a_running_demo(tmp_path: Path) -> None:
    """A second `up` in the same directory must not start a second federation over the first."""
    stack = Stack(tmp_path)
    stack.spawn("kb", ["kb", "serve", "--db", f"sqlite:///{tmp_path / 'kb.sqlite'}", "--port", "0"])
    try:
        result = subprocess.run(
            [QONNECT, "demo", "up", "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2
        assert "already running" in result.stderr and "kb" in result.stderr
    finally:
        assert down(tmp_path).returncode == 0
    assert not _is_ours(stack.state["pids"]["kb"])
    assert os.path.exists(tmp_path / "demo.json")
