"""Migration runs start below the replica's CPU priority; the replica's threads keep theirs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from qonnect.controller import proctree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux's")

CHILD_NICE = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"


@pytest.fixture(autouse=True)
def default_nice() -> Iterator[None]:
    yield
    proctree.set_migration_nice(proctree.DEFAULT_MIGRATION_NICE)


def _mine() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_children_of_a_run_inherit_the_lowered_priority_and_the_caller_keeps_its_own() -> None:
    base = _mine()
    out = proctree.run_niced(subprocess.check_output, [sys.executable, "-c", CHILD_NICE], text=True)
    assert int(out) == min(19, base + proctree.DEFAULT_MIGRATION_NICE)
    assert _mine() == base
    assert int(subprocess.check_output([sys.executable, "-c", CHILD_NICE], text=True)) == base


def test_the_increment_is_configurable_and_zero_runs_in_the_callers_thread() -> None:
    base = _mine()
    proctree.set_migration_nice(3)
    out = proctree.run_niced(subprocess.check_output, [sys.executable, "-c", CHILD_NICE], text=True)
    assert int(out) == min(19, base + 3)
    proctree.set_migration_nice(0)
    assert proctree.run_niced(threading.get_native_id) == threading.get_native_id()
    with pytest.raises(ValueError, match=r"0\.\.19"):
        proctree.set_migration_nice(20)
    with pytest.raises(ValueError):
        proctree.set_migration_nice(-1)


def test_the_result_and_the_exception_are_the_callers() -> None:
    assert proctree.run_niced(lambda a, b=0: a + b, 2, b=3) == 5

    def boom() -> None:
        raise KeyError("run failed")

    with pytest.raises(KeyError, match="run failed"):
        proctree.run_niced(boom)


def test_controller_run_rejects_a_nice_value_out_of_range(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from qonnect.cli import main

    secret = tmp_path / "secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    token = tmp_path / "token"
    token.write_text("t")
    argv = [
        "controller",
        "run",
        "--id",
        "r1",
        "--self",
        "127.0.0.1:1",
        "--peers",
        "127.0.0.1:1",
        "--raft-secret-file",
        str(secret),
        "--kb",
        "http://127.0.0.1:9",
        "--token-file",
        str(token),
        "--migration-nice",
        "25",
    ]
    assert main(argv) == 2
    assert "--migration-nice: expected an integer in 0..19, got 25" in capsys.readouterr().err
    assert proctree.migration_nice() == proctree.DEFAULT_MIGRATION_NICE
