"""`qonnect status` against a real KB holding the paper fleet (and a real controller replica)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _ui_fleet import PLACEMENT
from support import free_port, qonnect_cmd, start_process, stop_process, wait_for

pytestmark = pytest.mark.timeout(120)
TIERS = ["cloud", "fog", "edge"]


def status(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QONNECT_")}
    return subprocess.run(
        qonnect_cmd("status", *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        check=False,
    )


def reader_args(federation) -> list[str]:
    return ["--kb", federation.url, "--token-file", str(federation.reader_token_file)]


def test_json_has_every_cluster_by_tier_with_capacity_and_workloads(federation) -> None:
    run = status(*reader_args(federation), "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert list(doc["tiers"]) == TIERS
    paper = {c["name"]: c for c in federation.paper["clusters"]}
    for tier in TIERS:
        assert [c["name"] for c in doc["tiers"][tier]] == [f"{tier}-{i}" for i in (1, 2, 3)]
    for c in (c for tier in TIERS for c in doc["tiers"][tier]):
        node = paper[c["name"]]["nodes"][0]
        assert c["health"] == "healthy" and c["healthy"] is True
        assert c["nodes"] == c["nodes_ready"] == 1
        assert c["free"]["cpu"] == pytest.approx(node["allocatable"]["cpu"] - node["requested"]["cpu"])
        assert c["free"]["memory"] == node["allocatable"]["memory"] - node["requested"]["memory"]
        assert c["energy_kwh"] == pytest.approx(node["energy_kwh"])
        assert c["price_eur_h"] == pytest.approx(node["price_eur_h"])
        expected = sorted(svc for svc, where in PLACEMENT.items() if where == c["name"])
        assert sorted(a["service"] for a in c["running"]) == expected
        assert all(
            a["application"] == "bookinfo" and a["replicas"] == 1 and a["ready"] == 1 and a["desired"] == 1
            for a in c["running"]
        )
    assert doc["applications"] == ["bookinfo"]
    assert doc["controller"]["leader"] is None and doc["controller"]["replicas"] == []
    assert doc["controller"]["kb_fencing_term"] is None  # only an admin wrote the placement
    assert [e["type"] for e in doc["events"]] == ["deploy"]
    assert federation.reader_token not in run.stdout + run.stderr


def test_text_from_the_environment_names_every_tier_and_cluster(federation) -> None:
    run = status(env={"QONNECT_KB_URL": federation.url, "QONNECT_KB_TOKEN": federation.reader_token})
    assert run.returncode == 0, run.stderr
    out = run.stdout
    for tier in TIERS:
        assert f"{tier.upper()} (3/3 healthy)" in out
    for c in federation.paper["clusters"]:
        assert c["name"] in out
    assert "bookinfo/productpage x1 (1/1 pods ready)" in out
    assert "leader unknown" in out and "pass --controller URL" in out
    assert "deploy" in out and "bookinfo deployed energy-first" in out
    assert federation.reader_token not in out + run.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--kb: expected the KB URL"),
        (["--kb", "ftp://x"], "--kb: kb_url must start with http"),
        (
            ["--kb", "http://127.0.0.1:9", "--token-file", "/nonexistent/token"],
            "--token-file /nonexistent/token",
        ),
        (["--kb", "http://127.0.0.1:9", "--events", "0"], "--events: expected 1..1000"),
    ],
)
def test_bad_arguments_are_named(federation, args: list[str], message: str) -> None:
    run = status(*args, env={"QONNECT_KB_TOKEN": "qkb_secret-value"} if "--token-file" not in args else None)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert "qkb_secret-value" not in run.stderr


def test_refused_token_and_unreachable_kb_are_clear_errors(federation, tmp_path: Path) -> None:
    bad = tmp_path / "bad.token"
    bad.write_text("qkb_definitely-not-valid")
    run = status("--kb", federation.url, "--token-file", str(bad))
    assert run.returncode == 2 and "KB error 401" in run.stderr and "Traceback" not in run.stderr
    assert "qkb_definitely-not-valid" not in run.stdout + run.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    run = status("--kb", f"http://127.0.0.1:{port}", "--token-file", str(federation.reader_token_file))
    assert run.returncode == 2 and "KB unreachable" in run.stderr and "Traceback" not in run.stderr


def test_watch_refreshes_until_interrupted(federation, tmp_path: Path) -> None:
    out_file = tmp_path / "watch.out"
    with open(out_file, "w") as out:
        proc = subprocess.Popen(
            qonnect_cmd("status", *reader_args(federation), "--watch", "0.3"),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            # a runner that ignores SIGINT (xdist workers, `cmd &` in a script) passes that on, and
            # Python keeps an inherited SIG_IGN: give the command the terminal's default, as a user has
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        # two refreshes, however long the command takes to start on a busy machine
        wait_for(lambda: out_file.read_text().count("qonnect federation at") >= 2, 60, "two refreshes")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=60)  # a loaded machine may take a while to schedule it
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # never leave it running after the test
            raise
    assert proc.returncode == 130, err
    assert out_file.read_text().count("qonnect federation at") >= 2


@pytest.fixture()
def controller(federation, tmp_path: Path) -> Iterator[str]:
    """One real `qonnect controller run` replica (a group of one elects itself); its status URL."""
    secret = tmp_path / "raft.secret"
    secret.write_text(os.urandom(24).hex())
    secret.chmod(0o600)
    token = tmp_path / "controller.token"
    token.write_text(federation.token("controller"))
    raft = f"127.0.0.1:{free_port()}"
    ready = tmp_path / "ready.json"
    proc = start_process(
        qonnect_cmd(
            "controller",
            "run",
            "--id",
            "solo",
            "--self",
            raft,
            "--peers",
            raft,
            "--kb",
            federation.url,
            "--token-file",
            str(token),
            "--raft-secret-file",
            str(secret),
            "--data-dir",
            str(tmp_path / "data"),
            "--heartbeat-timeout",
            "600",
            "--min-dwell",
            "600",
            "--ready-file",
            str(ready),
        ),
        tmp_path / "controller.log",
    )
    try:
        wait_for(ready.exists, 30, "the controller to serve")
        yield f"http://127.0.0.1:{json.loads(ready.read_text())['http']}"
    finally:
        stop_process(proc)


def test_controller_leader_and_term_come_from_its_status_endpoint(federation, controller: str) -> None:
    def leading() -> dict | None:
        run = status(*reader_args(federation), "--json", "--controller", controller)
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)["controller"]
        return doc if doc["leader"] else None

    doc = wait_for(leading, 30, "the replica to lead", interval=0.3)
    assert doc["leader"] == "solo" and doc["term"] >= 1
    assert doc["replicas"][0]["state"] == "leader"
    run = status(*reader_args(federation), "--controller", f"{controller},http://127.0.0.1:9")
    assert run.returncode == 0, run.stderr
    assert f"controller: leader solo, term {doc['term']}" in run.stdout
    assert "http://127.0.0.1:9: UNREACHABLE" in run.stdout


PULL = (
    'ImagePullBackOff: Back-off pulling image "qonnect.test/pull-fail/ratings:2" '
    "(pod ratings-v1-7d9-x2k, container ratings); 1 old replica(s) pending termination"
)


def test_a_failing_new_revision_shows_its_reason_not_its_old_pods_ready(federation) -> None:
    """Issue 34.3: the old pod still counts 1/1 ready while the new revision cannot pull."""
    edge1 = next(c for c in federation.paper["clusters"] if c["name"] == "edge-1")
    federation.report(edge1, failing={"ratings": PULL})
    try:
        run = status(*reader_args(federation))
        assert run.returncode == 0, run.stderr
        (line,) = [x for x in run.stdout.splitlines() if "bookinfo/ratings" in x]
        assert "pods ready" not in line, line
        assert line.strip().startswith(
            "bookinfo/ratings x1 (Progressing: Deployment/ratings-v1: ImagePullBackOff: Back-off pulling image "
            '"qonnect.test/pull-fail/ratings:2"'
        ), line
        run = status(*reader_args(federation), "--json")
        (edge,) = [c for c in json.loads(run.stdout)["tiers"]["edge"] if c["name"] == "edge-1"]
        (ratings,) = [a for a in edge["running"] if a["service"] == "ratings"]
        assert ratings["status"] == "Progressing" and ratings["reason"] == f"Deployment/ratings-v1: {PULL}"
        assert "bookinfo/productpage x1 (1/1 pods ready)" in status(*reader_args(federation)).stdout
    finally:
        federation.report(edge1)
