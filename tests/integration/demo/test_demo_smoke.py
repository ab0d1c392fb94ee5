"""`qonnect demo up|down` refusing what it cannot do, with a clear message (no traceback).

The set-up and the five steps themselves are played in test_demo_story.py.
"""

from __future__ import annotations

import os
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
