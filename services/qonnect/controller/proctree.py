"""Every process of a migration run dies with the run, on cancel and with the replica.

A process group is not enough: ansible-runner starts ``ansible-playbook`` in its own session
and Ansible's worker calls ``setsid()``, so the worker and the running module escape a group
kill and, when the replica dies, are reparented to init and finish the deploy. Instead each
run's environment carries a marker (``QONNECT_RLA_RUN=<owner>/<run>``) that every descendant
inherits, whatever session or parent it ends up with; the processes carrying it are found in
/proc and killed until none is left.

A replica killed with SIGKILL cannot clean up, so each replica starts a small watchdog
(``python -m qonnect.controller.proctree OWNER``) holding the read end of a pipe whose write end only
the replica holds: when the replica dies the pipe closes and the watchdog kills every process
marked with the replica's owner id.

Every run also starts at a lower CPU priority than the replica (``run_niced``, nice +10 by
default, ``--migration-nice``): on a busy host the playbooks wait, not the replica's Raft
heartbeats and elections. The run is started from a short-lived thread whose own nice value is
raised (Linux sets the priority of one thread, and every process it forks inherits it), so the
replica's other threads keep their priority and nothing has to be raised back (an unprivileged
process cannot lower a nice value again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

MARK = "QONNECT_RLA_RUN"
DEFAULT_MIGRATION_NICE = 10  # added to the replica's nice value for every migration process
MAX_NICE = 19

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_migration_nice = DEFAULT_MIGRATION_NICE


def set_migration_nice(increment: int) -> None:
    """How much lower than the replica's the CPU priority of migration processes is (0: same)."""
    global _migration_nice
    if not 0 <= increment <= MAX_NICE:
        raise ValueError(f"expected a nice increment in 0..{MAX_NICE}, got {increment}")
    _migration_nice = increment


def migration_nice() -> int:
    return _migration_nice


def _lower_this_thread(increment: int) -> int | None:
    """Raise the calling thread's nice value by ``increment`` (capped at 19); the new value, or
    None where a thread's priority cannot be set on its own (not Linux)."""
    if not sys.platform.startswith("linux") or increment <= 0:
        return None
    tid = threading.get_native_id()
    target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, tid) + increment)
    os.setpriority(os.PRIO_PROCESS, tid, target)  # on Linux: this thread only
    return target


def run_niced(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``func(*args, **kwargs)`` in a thread of its own at the migration priority, waited for
    here: whatever it forks (ansible-playbook, its workers, their modules) inherits the
    lowered priority; its result or exception is the caller's."""
    increment = _migration_nice
    if increment <= 0 or not sys.platform.startswith("linux"):
        return func(*args, **kwargs)
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            _lower_this_thread(increment)
        except OSError as exc:  # a seccomp'd container: run anyway, at the replica's priority
            log.warning("could not lower the priority of a migration run: %s", exc)
        try:
            box["result"] = func(*args, **kwargs)
        except BaseException as exc:  # handed to the caller as is
            box["error"] = exc

    worker = threading.Thread(target=body, name=f"niced-{getattr(func, '__name__', 'run')}", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def new_owner(name: str) -> str:
    """A unique owner id for one replica process (names stay readable in `ps e`)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "replica"
    return f"{safe}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def marked(prefix: str) -> list[int]:
    """Pids of live processes whose marker value starts with ``prefix``."""
    needle = f"{MARK}={prefix}".encode()
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or a zombie/kernel thread
            continue
        if any(item.startswith(needle) for item in env.split(b"\0")):
            found.append(int(entry.name))
    return found


def kill_marked(prefix: str, timeout: float = 10.0) -> int:
    """SIGKILL every process marked with ``prefix`` until none is left (a process forking
    while we scan is caught by the next scan); returns how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    clean_scans = 0
    while clean_scans < 2 and time.monotonic() < deadline:
        pids = marked(prefix)
        if not pids:
            clean_scans += 1
            time.sleep(0.02)
            continue
        clean_scans = 0
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.02)
    return len(killed)


class Watchdog:
    """The replica's side of the watchdog: started once, kills marked processes on our death."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = subprocess.Popen(  # our own interpreter and module
            [sys.executable, "-m", "qonnect.controller.proctree", self.owner],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def stop(self) -> None:
        """Normal shutdown: closing the pipe makes the watchdog sweep and exit."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=15)


def _watch(owner: str) -> int:
    """Block until the replica's end of the pipe closes, then kill its runs' processes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the replica must not stop us first
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    kill_marked(owner + "/")
    return 0


if __name__ == "__main__":
    sys.exit(_watch(sys.argv[1]))
