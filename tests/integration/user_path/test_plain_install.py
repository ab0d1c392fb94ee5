"""Issue 24.1: the services from a plain install, outside this repository's venv.

The collection tarball is built and installed as a user would (``ansible-galaxy collection
install``), then ``pip install <collection>/services[all]`` goes into a NEW virtualenv: no
``.pth``, no ``ANSIBLE_COLLECTIONS_PATH``, no ``PYTHONPATH``, a ``HOME`` of its own, run from a
directory outside the checkout. Everything the services import must come from that install (the
wheel carries the collection, services/setup.py). The third-party wheels come from the wheelhouse
``make setup`` fills (``~/.cache/qonnect/wheels``, ``QONNECT_WHEELHOUSE``) so the install is
offline and quick; without it pip uses the package index.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import support
from user_path_support import ROOT, tool

pytestmark = pytest.mark.slow  # builds, installs and runs the collection as a user would

WHEELHOUSE = Path(os.environ.get("QONNECT_WHEELHOUSE", Path.home() / ".cache" / "qonnect" / "wheels"))
# The component whose code is not in the product package (qonnect-testbed): it names what to install.
ELSEWHERE = {"testbed"}

# Walks the whole `qonnect` parser and runs `main([..., "--help"])` for every command in one
# process of the new venv (one interpreter start instead of one per command).
WALK = textwrap.dedent(
    """
    import argparse, contextlib, io, json
    from qonnect import cli

    def walk(parser, path):
        yield path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, path + [name])

    results = []
    for path in walk(cli.build_parser([]), []):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(path + ["--help"])
            except SystemExit as exc:
                code = exc.code
        results.append({"argv": path, "code": code, "out": out.getvalue(), "err": err.getvalue()})
    print(json.dumps(results))
    """
)


@dataclass
class Plain:
    """A virtualenv holding only what ``pip install <collection>/services[all]`` put there."""

    base: Path
    venv: Path
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv),
            cwd=self.base,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def python(self, code: str) -> subprocess.CompletedProcess:
        return self.run(str(self.venv / "bin" / "python"), "-c", code)

    def qonnect(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "qonnect"), *args]


@pytest.fixture(scope="module")
def plain(built: Path, tmp_path_factory) -> Plain:
    base = tmp_path_factory.mktemp("plain")
    collections = base / "collections"
    subprocess.run(
        # --force: the project venv's site-packages holds the checkout as qonnect.core already
        [tool("ansible-galaxy"), "collection", "install", "--force", str(built), "-p", str(collections)],
        check=True,
        capture_output=True,
        timeout=120,
        env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections)),
    )
    services = collections / "ansible_collections" / "qonnect" / "core" / "services"
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    offline = ["--no-index", "--find-links", str(WHEELHOUSE)] if any(WHEELHOUSE.glob("*.whl")) else []
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            *offline,
            f"{services}[all]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH")},
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    home = base / "home"
    home.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    return Plain(base, venv, env)


def test_everything_imported_comes_from_the_new_venv(plain):
    """No path into the checkout: the package, the collection's module_utils, the migration
    playbook and what the controller role checks all resolve inside the venv."""
    probe = plain.python(
        "import json, qonnect, qonnect.controller.cli, pysyncobj, ansible_runner\n"
        "from ansible_collections.qonnect.core.plugins.module_utils import kb_client\n"
        "from qonnect.controller.executor import default_playbook\n"
        "print(json.dumps([qonnect.__file__, kb_client.__file__, default_playbook()]))"
    )
    assert probe.returncode == 0, probe.stderr
    paths = [Path(p) for p in json.loads(probe.stdout)]
    for path in paths:
        assert path.is_relative_to(plain.venv), f"{path} is outside the new venv"
        assert ROOT not in path.resolve().parents, f"{path} resolves into the checkout"
    assert paths[2].is_file()
    pth = [
        p for p in plain.venv.rglob("*.pth") if "collections" in p.read_text() or str(ROOT) in p.read_text()
    ]
    assert pth == [], f"a .pth puts something on sys.path: {pth}"


def test_every_command_answers_help(plain):
    top = plain.run(*plain.qonnect("--help"))
    assert top.returncode == 0, top.stderr
    assert "controller" in top.stdout and "kb" in top.stdout
    run_help = plain.run(*plain.qonnect("controller", "run", "--help"))
    assert run_help.returncode == 0, run_help.stderr
    assert "--raft-secret-file" in run_help.stdout

    walked = plain.python(WALK)
    assert walked.returncode == 0, walked.stderr[-3000:]
    results = json.loads(walked.stdout)
    commands = {" ".join(r["argv"]) for r in results}
    assert {"kb serve", "kb token create", "agent", "controller run", "plan", "status"} <= commands, commands
    for r in results:
        name = " ".join(["qonnect", *r["argv"]])
        assert "Traceback" not in r["err"], f"{name} --help: {r['err']}"
        if r["argv"] and r["argv"][0] in ELSEWHERE:
            assert r["code"] == 2 and "pip install" in r["err"], f"{name} --help: {r}"
        else:
            assert r["code"] == 0 and r["out"].startswith(f"usage: {name}"), f"{name} --help: {r}"


def test_a_controller_replica_runs_and_stops(plain):
    """A KB and one controller replica from the new venv: the replica answers /healthz as the
    leader of its one-member group, then stops cleanly on SIGTERM."""
    base = plain.base / "run"
    base.mkdir()
    db = f"sqlite:///{base / 'kb.sqlite'}"
    token = plain.run(
        *plain.qonnect("kb", "token", "create", "--db", db, "--role", "controller", "--name", "c1")
    )
    assert token.returncode == 0, token.stderr
    (base / "kb.token").write_text(token.stdout.strip() + "\n")
    (base / "raft.secret").write_text(secrets.token_urlsafe(48) + "\n")
    for name in ("kb.token", "raft.secret"):
        (base / name).chmod(0o600)
    port_file = base / "kb.port"
    kb = support.start_process(
        plain.qonnect(
            "kb", "serve", "--db", db, "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file)
        ),
        base / "kb.log",
        env=plain.env,
        cwd=base,
    )
    controller = None
    try:
        port = support.wait_for(
            lambda: port_file.exists() and port_file.read_text().strip(), 60, "the KB port"
        )
        raft, http = support.free_port(), support.free_port()
        controller = support.start_process(
            plain.qonnect(
                "controller",
                "run",
                "--id",
                "c1",
                "--self",
                f"127.0.0.1:{raft}",
                "--peers",
                f"127.0.0.1:{raft}",
                "--kb",
                f"http://127.0.0.1:{port}",
                "--token-file",
                str(base / "kb.token"),
                "--raft-secret-file",
                str(base / "raft.secret"),
                "--data-dir",
                str(base / "c1"),
                "--http",
                f"127.0.0.1:{http}",
            ),
            base / "controller.log",
            env=plain.env,
            cwd=base,
        )

        def leader() -> dict | None:
            assert controller.poll() is None, (base / "controller.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=2) as resp:
                    health = json.load(resp)
            except OSError:
                return None
            return health if health.get("state") == "leader" else None

        health = support.wait_for(leader, 60, "the replica to lead")
        assert health["ok"] is True and health["node"]
        assert support.stop_process(controller, timeout=20) == 0, (base / "controller.log").read_text()[
            -3000:
        ]
    finally:
        if controller is not None:
            support.stop_process(controller)
        support.stop_process(kb)
