"""`qonnect agent` as a process: refused arguments exit 2 at once; SIGTERM is a clean stop."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from support import qonnect_cmd
from support.specs import kubeconfig as kubeconfig_doc

pytestmark = pytest.mark.timeout(120)


def test_refused_arguments_exit_2_with_the_reason_and_no_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("very-secret-token\n")
    missing = str(tmp_path / "missing.yaml")
    proc = subprocess.run(
        [
            *qonnect_cmd(),
            "agent",
            "--cluster",
            "edge-1",
            "--kubeconfig",
            missing,
            "--kb",
            "http://127.0.0.1:9",
            "--token-file",
            str(token),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "qonnect agent: error: --kubeconfig" in proc.stderr and "Traceback" not in proc.stderr
    assert "very-secret-token" not in proc.stderr + proc.stdout


def test_sigterm_stops_the_agent_cleanly(tmp_path):
    """The cluster and the KB are both down; the agent runs anyway and stops on SIGTERM."""
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(json.dumps(kubeconfig_doc("https://127.0.0.1:9", "t")))
    token = tmp_path / "token"
    token.write_text("t\n")
    argv = [
        *qonnect_cmd(),
        "agent",
        "--cluster",
        "edge-1",
        "--kubeconfig",
        str(kubeconfig),
        "--kb",
        "http://127.0.0.1:9",
    ]
    argv += ["--token-file", str(token), "--interval", "0.2", "--state-dir", str(tmp_path / "state")]
    outbox = tmp_path / "state" / "outbox.json"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not outbox.exists() and time.monotonic() < deadline:  # its first report, buffered
            assert proc.poll() is None
            time.sleep(0.1)
        assert outbox.read_text().startswith("[{")
        time.sleep(1)  # a few more ticks against the dead cluster and KB
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
