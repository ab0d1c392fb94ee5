"""What every integration test needs to run real processes: one home for polling, ports,
stopping processes and launching ``qonnect``. Tests import it as ``support`` (pytest.ini puts
``tests/`` on the path)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# The installed console script: `python -m qonnect.cli` would load the CLI module twice.
QONNECT = str(Path(sys.executable).parent / "qonnect")


def qonnect_reference() -> Path:
    """QONNECT's own files (sample application, evaluation data): ``shared/qonnect-reference``
    beside the checkout, found from any copy of it (ansible-test works on a copy under build/)
    or named by QONNECT_REFERENCE. Read from there, never copied into the repository."""
    named = os.environ.get("QONNECT_REFERENCE")
    if named:
        return Path(named)
    for parent in Path(__file__).resolve().parents:
        found = parent / "shared" / "qonnect-reference"
        if found.is_dir():
            return found
    raise FileNotFoundError("shared/qonnect-reference is not beside the checkout; set QONNECT_REFERENCE")


def project_helm() -> Path:
    """The bin directory of the project's helm: in a checkout scripts/build-helm.sh builds it once
    into its cache (a warm cache builds nothing); in a copy without scripts (ansible-test units)
    the cache `make kube` filled. Raises RuntimeError when neither has it (tests then fail, not
    skip)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-helm.sh"
    if script.exists():
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=1800, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/build-helm.sh failed: {done.stderr[-2000:]}")
        return Path(done.stdout.strip().splitlines()[-1])
    cache = Path(os.environ.get("QONNECT_HELM_CACHE") or Path.home() / ".cache" / "qonnect" / "helm")
    found = sorted(cache.glob("v*-b*/bin/helm"))  # VERSION-bBUILD: helm's own Kubernetes defaults
    if not found:
        raise RuntimeError(f"the project's helm is not built in {cache} (make kube)")
    return found[-1].parent


def qonnect_cmd(*args: str) -> list[str]:
    """Command line of ``qonnect ARGS`` with the test session's interpreter."""
    return [QONNECT, *args]


def run(
    cmd: list[str],
    *,
    check: bool = True,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` to the end, output captured as text; with ``check`` a failure fails the test
    with the command's output (not a bare CalledProcessError)."""
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=cwd, input=input
    )
    if check and result.returncode != 0:
        name = " ".join(Path(cmd[0]).name if i == 0 else str(arg) for i, arg in enumerate(cmd[:4]))
        raise AssertionError(f"{name} ... failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def run_qonnect(*args: str, **options) -> subprocess.CompletedProcess:
    """``qonnect ARGS`` through ``run`` (same options: check, timeout, env, cwd, input)."""
    return run(qonnect_cmd(*args), **options)


def wait_for(
    check: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail the test after
    ``timeout`` seconds, naming ``what`` and the last exception of a type in ``retry_on``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    value: object = None
    while True:
        try:
            value = check()
            if value:
                return value
        except retry_on as exc:
            last = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last})" if last is not None else f" (last value: {value!r:.300})"
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


# Ports handed to tests come from below the kernel's ephemeral range (32768-60999 on Linux), a
# block of 1000 per xdist worker: a port checked free and then bound by the test's server a moment
# later cannot meanwhile become another process's outgoing connection or another worker's server
# (a port from bind(0) could: "Address already in use" under parallel runs).
PORT_BASE, PORT_BLOCK, PORT_BLOCKS = 20000, 1000, 12
_next_port = itertools.count()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, from this worker's own block (the caller binds it
    soon after); successive calls give different ports."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    base = PORT_BASE + (index % PORT_BLOCKS) * PORT_BLOCK
    for _attempt in range(PORT_BLOCK):
        port = base + next(_next_port) % PORT_BLOCK
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or TIME_WAIT) from an earlier test: the next one
            return port
    raise RuntimeError(f"no free port in {base}-{base + PORT_BLOCK - 1} on {host}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different free ports (free_port, one after another)."""
    return [free_port(host) for _i in range(count)]


def start_process(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``cmd`` in a session of its own (so stop_process reaches its children), output to
    ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> int | None:
    """SIGTERM the process (and its group when it leads one), wait, SIGKILL as a last resort;
    returns its exit status."""
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        pass


def kubectl(
    kubeconfig: str | Path, *args: str, input: str | None = None, binary: str = "kubectl", timeout: float = 60
) -> str:
    """``kubectl --kubeconfig KUBECONFIG ARGS`` (``input`` on stdin); its stdout, or a failed test
    with kubectl's output."""
    return run([binary, "--kubeconfig", str(kubeconfig), *args], input=input, timeout=timeout).stdout
