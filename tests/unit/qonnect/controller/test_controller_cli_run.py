"""``qonnect controller run``: what the replica is built with and the order of its start-up.

The Controller is a stand-in that records its Config and the calls made on it, so the test
covers the whole command from flags to ``run_forever`` without a Raft node or a KB.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest
from qonnect.controller import proctree
from qonnect.controller.timeouts import run_timeout_for


class FakeController:
    made: list[FakeController] = []

    def __init__(self, cfg: Any, planner: Any = None) -> None:
        self.cfg = cfg
        self.planner = planner
        self.calls: list[str] = []
        type(self).made.append(self)

    def start_http(self) -> int:
        self.calls.append("start_http")
        return 4321

    def run_forever(self) -> None:
        self.calls.append("run_forever")

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    token = tmp_path / "kb.token"
    token.write_text(" tok \n")
    secret = tmp_path / "raft.secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    playbook = tmp_path / "migrate.yml"
    playbook.write_text("- hosts: localhost\n")
    return {"token": token, "secret": secret, "playbook": playbook, "dir": tmp_path}


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[int, Any]:
    """Controller replaced by FakeController; the signal handlers installed are recorded, not set."""
    handlers: dict[int, Any] = {}
    FakeController.made = []
    monkeypatch.setattr("qonnect.controller.loop.Controller", FakeController)
    monkeypatch.setattr(signal, "signal", handlers.__setitem__)
    level = logging.getLogger("qonnect").level
    nice = proctree.migration_nice()
    yield handlers
    logging.getLogger("qonnect").setLevel(level)
    proctree.set_migration_nice(nice)


def argv(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "controller",
        "run",
        "--id",
        "r1",
        "--self",
        "127.0.0.1:7001",
        "--peers",
        " 127.0.0.1:7001, 127.0.0.1:7002,,",
        "--kb",
        "https://kb.example:8443",
        "--token-file",
        str(files["token"]),
        "--raft-secret-file",
        str(files["secret"]),
        "--playbook",
        str(files["playbook"]),
        "--data-dir",
        str(files["dir"] / "data"),
        *extra,
    ]


def test_run_builds_the_config_from_the_flags_and_starts_in_order(files, started, caplog):
    from qonnect.cli import main

    ready = files["dir"] / "ready.json"
    extra = [
        "--http",
        "0.0.0.0:9101",
        "--agent-interval",
        "4",
        "--cluster-grace",
        "0",
        "--no-hedge",
        "--hedge-max-suspect",
        "0.5",
        "--hedge-share",
        "1",
        "--max-version-failures",
        "3",
        "--no-rollback",
        "--tick",
        "0.5",
        "--progressing-timeout",
        "120",
        "--hysteresis",
        "0.25",
        "--min-dwell",
        "5",
        "--stable-seconds",
        "7",
        "--max-attempts",
        "2",
        "--max-concurrent-runs",
        "3",
        "--batch-size",
        "9",
        "--max-drift-moves-per-minute",
        "0",
        "--wait-timeout",
        "30",
        "--extra-var",
        "a=1",
        "--extra-var",
        "b=x=y",
        "--migration-nice",
        "7",
        "--survivability-every",
        "0",
        "--survive-label",
        " site ",
        "--survive-label",
        " ",
        "--ready-file",
        str(ready),
    ]
    with caplog.at_level(logging.WARNING, logger="qonnect.controller"):
        assert main(argv(files, *extra)) == 0
    (controller,) = FakeController.made
    cfg = controller.cfg
    assert cfg.self_addr == "127.0.0.1:7001"
    assert cfg.peers == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert cfg.kb_url == "https://kb.example:8443"
    assert cfg.token == "tok"
    assert cfg.token_file == os.path.abspath(files["token"])
    assert cfg.secret == files["secret"].read_text().strip()
    assert cfg.data_dir == os.path.abspath(files["dir"] / "data")
    assert cfg.playbook == os.path.abspath(files["playbook"])
    assert (cfg.http_host, cfg.http_port) == ("0.0.0.0", 9101)
    assert cfg.tick == 0.5 and cfg.max_attempts == 2 and cfg.rollback is False
    assert cfg.survivability_every == 0 and cfg.survive_labels == ("site",)
    assert (cfg.max_concurrent_runs, cfg.batch_size, cfg.max_drift_moves_per_minute) == (3, 9, 0)
    assert cfg.wait_timeout == 30 and cfg.run_timeout == run_timeout_for(30)
    assert cfg.extravars == {"a": "1", "b": "x=y"}
    assert cfg.name == "r1"
    s = cfg.settings
    assert (s.heartbeat_timeout, s.node_grace) == (12.0, 12.0)
    assert (s.progressing_timeout, s.stable_seconds, s.min_dwell, s.hysteresis) == (120, 7, 5, 0.25)
    assert (s.cluster_grace, s.max_version_failures) == (0, 3)
    assert (s.hedge, s.hedge_max_suspect, s.hedge_share) == (False, 0.5, 1)
    assert proctree.migration_nice() == 7
    assert controller.calls == ["start_http", "run_forever"]
    assert json.loads(ready.read_text()) == {"http": 4321, "pid": os.getpid(), "id": "r1"}
    assert not Path(f"{ready}.tmp").exists()
    assert [r.getMessage() for r in caplog.records if r.name == "qonnect.controller"] == [
        "replica r1: raft 127.0.0.1:7001, status http://0.0.0.0:4321/status"
    ]
    assert set(started) == {signal.SIGTERM, signal.SIGINT}
    started[signal.SIGTERM](signal.SIGTERM, None)
    assert controller.calls[-1] == "stop"


def test_run_defaults(files, started, monkeypatch):
    from qonnect.cli import main
    from qonnect.controller import loop

    monkeypatch.chdir(files["dir"])
    assert main(argv(files)[:-2]) == 0
    (controller,) = FakeController.made
    cfg = controller.cfg
    assert cfg.data_dir == os.path.abspath("qonnect-controller-r1")
    assert (cfg.http_host, cfg.http_port) == ("127.0.0.1", 0)
    assert cfg.max_concurrent_runs == loop.default_concurrency()
    assert cfg.settings.heartbeat_timeout == 6.0 and cfg.settings.node_grace == 10.0
    assert cfg.survive_labels == () and cfg.extravars == {}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # several bad flags at once: the first one checked is the one reported
        (["--self", "bad", "--http", "x"], "--self: expected HOST:PORT"),
        (["--http", "x", "--kb", "ftp://k"], "--http: expected HOST:PORT, got 'x'"),
        (["--kb", "ftp://k", "--agent-interval", "0"], "--kb: expected an http:// or https:// URL"),
        (["--agent-interval", "0", "--hysteresis", "1"], "--agent-interval: expected a number"),
        (["--heartbeat-timeout", "-1", "--hysteresis", "1"], "--heartbeat-timeout: expected"),
        (["--hysteresis", "1", "--max-attempts", "0"], "--hysteresis: expected a fraction"),
        (["--max-attempts", "0", "--batch-size", "0"], "--max-attempts: expected an integer"),
        (["--batch-size", "0", "--extra-var", "x"], "--batch-size: expected an integer"),
        (["--extra-var", "x", "--wait-timeout", "0"], "--extra-var: expected KEY=VALUE"),
        (["--wait-timeout", "0", "--migration-nice", "99"], "--wait-timeout: expected"),
        (["--migration-nice", "99", "--playbook", "/nonexistent"], "--migration-nice: expected"),
        (["--playbook", "/nonexistent", "--tick", "0"], "--playbook: /nonexistent does not exist"),
        (["--progressing-timeout", "0", "--cluster-grace", "-1"], "--progressing-timeout: expected"),
        (["--cluster-grace", "-1", "--max-version-failures", "0"], "--cluster-grace: expected"),
        (["--max-version-failures", "0", "--hedge-share", "2"], "--max-version-failures: expected"),
        (["--hedge-max-suspect", "0", "--hedge-share", "2"], "--hedge-max-suspect: expected"),
        (["--hedge-share", "2", "--tick", "0"], "--hedge-share: expected a share"),
        (["--tick", "0", "--survivability-every", "-1"], "--tick: expected"),
        (["--survivability-every", "-1"], "--survivability-every: expected"),
    ],
)
def test_run_reports_the_first_bad_flag(files, started, capsys, flags, message):
    from qonnect.cli import main

    assert main(argv(files, *flags)) == 2
    assert message in capsys.readouterr().err
    assert FakeController.made == []


def test_the_token_is_read_after_the_settings_and_before_the_tick(files, started, capsys):
    from qonnect.cli import main

    files["token"].write_text("\n")
    assert main(argv(files, "--tick", "0")) == 2
    assert "--token-file" in capsys.readouterr().err and FakeController.made == []
    assert main(argv(files, "--hedge-share", "2")) == 2
    assert "--hedge-share" in capsys.readouterr().err


def test_the_migration_nice_is_set_before_the_playbook_is_checked(files, started, capsys):
    from qonnect.cli import main

    assert main(argv(files, "--migration-nice", "5", "--playbook", "/nonexistent")) == 2
    assert "--playbook" in capsys.readouterr().err
    assert proctree.migration_nice() == 5
