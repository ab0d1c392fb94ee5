"""``start_federation``: real clusters for tests, driven exactly as the CLI drives them.

It runs ``qonnect testbed up --engine kube`` (the detached ``serve`` process owns every
component; they die with it) and returns a handle whose methods are the CLI's verbs, sent to the
same control endpoint. Tests that use it therefore exercise the commands users run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

from qonnect_testbed import cli
from qonnect_testbed.errors import TestbedError
from qonnect_testbed.federation import FEDERATION_FILE


class KubeEngineError(Exception):
    """The real engine could not start or do what was asked: the message says why."""


def _run(argv: list[str]) -> str:
    parser = argparse.ArgumentParser(prog="qonnect")
    cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["testbed", *argv])
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            args.func(args)
    except TestbedError as exc:
        raise KubeEngineError(str(exc)) from None
    return out.getvalue()


class KubeFederation:
    """A running real-engine testbed in ``directory``; ``stop`` (or ``with``) ends it."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory).resolve()
        self.federation_file = self.directory / FEDERATION_FILE

    def _control(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 120.0
    ) -> dict[str, Any]:
        try:
            return cli.control(self.directory, method, path, body, timeout=timeout)
        except TestbedError as exc:
            raise KubeEngineError(str(exc)) from None

    @property
    def clusters(self) -> list[str]:
        return [c["name"] for c in self.status()["clusters"]]

    def kubeconfig(self, cluster: str) -> Path:
        return self.directory / "kubeconfigs" / f"{cluster}.yaml"

    def restricted_kubeconfig(self, cluster: str) -> Path:
        return self.directory / "kubeconfigs" / "restricted" / f"{cluster}.yaml"

    def status(self) -> dict[str, Any]:
        return self._control("GET", "/status")

    def fail(self, cluster: str) -> None:
        self._control("POST", f"/clusters/{cluster}/fail")

    def recover(self, cluster: str) -> None:
        self._control("POST", f"/clusters/{cluster}/recover")

    def node_down(self, cluster: str, node: str) -> None:
        self._control("POST", f"/clusters/{cluster}/nodes/{node}/down")

    def node_up(self, cluster: str, node: str) -> None:
        self._control("POST", f"/clusters/{cluster}/nodes/{node}/up")

    def set_labels(self, cluster: str, labels: dict[str, str | None], node: str | None = None) -> list[str]:
        return self._control("POST", f"/clusters/{cluster}/labels", {"labels": labels, "node": node})["nodes"]

    def stop(self) -> None:
        """Stop every process of the testbed (idempotent)."""
        _run(["down", "--dir", str(self.directory)])

    def __enter__(self) -> KubeFederation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_federation(
    dir: Path,
    profile: str = "tiers",
    *,
    clusters: int | None = None,
    start_delay: float = 1.0,
    node_monitor_grace_period: float | None = None,
    default_unreachable_toleration_seconds: int | None = None,
    default_not_ready_toleration_seconds: int | None = None,
    timeout: float = 300.0,
) -> KubeFederation:
    """Start real clusters per ``profile`` in ``dir``; returns when all are ready (see module doc)."""
    argv = [
        "up",
        "--engine",
        "kube",
        "--dir",
        str(dir),
        "--profile",
        profile,
        "--start-delay",
        str(start_delay),
        "--timeout",
        str(timeout),
    ]
    if clusters is not None:
        argv += ["--clusters", str(clusters)]
    for flag, value in (
        ("--node-monitor-grace-period", node_monitor_grace_period),
        ("--default-unreachable-toleration-seconds", default_unreachable_toleration_seconds),
        ("--default-not-ready-toleration-seconds", default_not_ready_toleration_seconds),
    ):
        if value is not None:
            argv += [flag, str(value)]
    _run(argv)
    return KubeFederation(Path(dir))
