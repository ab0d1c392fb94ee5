"""The suite's xdist scheduling (tests/support/scheduling.py) keeps a group on one worker, splits
an engine-parametrized group per engine and records each group's seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]

CONFTEST = """
from support.scheduling import Scheduling

def pytest_addoption(parser):
    parser.addoption("--write-group-durations", default=None)

def pytest_configure(config):
    config.pluginmanager.register(Scheduling(config), "qonnect-scheduling")
"""

MODULE = """
import os, time, pytest
{mark}

@pytest.mark.parametrize("engine", ["emulator", "kube"])
@pytest.mark.parametrize("i", range(2))
def test_one(engine, i):
    time.sleep(0.05)
    with open(os.environ["LOG"], "a") as log:
        log.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{__name__}} {{engine}}\\n")
"""


def test_groups_stay_on_one_worker_split_per_engine_and_are_recorded(tmp_path: Path):
    for name, mark in {
        "test_a": 'pytestmark = pytest.mark.xdist_group("shared")',
        "test_b": 'pytestmark = pytest.mark.xdist_group("shared")',
        "test_c": "",
    }.items():
        (tmp_path / f"{name}.py").write_text(MODULE.format(mark=mark))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    log, recorded = tmp_path / "log", tmp_path / "groups.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "3",
            "--dist",
            "loadgroup",
            "--no-loadscope-reorder",
            "--write-group-durations",
            str(recorded),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
        env={"PYTHONPATH": str(TESTS), "LOG": str(log), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    workers: dict[tuple[str, str], set[str]] = {}
    for line in log.read_text().splitlines():
        worker, module, engine = line.split()
        group = ("shared" if module in ("test_a", "test_b") else module, engine)
        workers.setdefault(group, set()).add(worker)
    assert len(workers) == 4 and all(len(w) == 1 for w in workers.values()), workers
    seconds = json.loads(recorded.read_text())
    assert set(seconds) == {"shared[emulator]", "shared[kube]", "test_c.py[emulator]", "test_c.py[kube]"}
    assert seconds["shared[kube]"] >= 0.2 and seconds["test_c.py[kube]"] >= 0.1, seconds
