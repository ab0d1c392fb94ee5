"""Issue 24.3: the collection installs its own services.

The knowledge_base role, from the collection installed out of the built tarball, with no
``qonnect_python`` and a virtualenv that does not exist yet: it unpacks the qonnect sources the
tarball ships onto the target, installs them (nothing named ``qonnect`` from an index; the
dependencies from the wheelhouse ``make setup`` fills, through pip's own PIP_NO_INDEX /
PIP_FIND_LINKS, else from the index), starts the KB, and a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import support
from test_plain_install import WHEELHOUSE
from user_path_support import tool

BIN = Path(sys.executable).parent

PLAY = """
- name: A KB installed by its role
  hosts: localhost
  gather_facts: false
  roles:
    - role: qonnect.core.knowledge_base
      knowledge_base_state: "{{{{ state }}}}"
      knowledge_base_base_dir: {base}
      knowledge_base_venv: {venv}
      knowledge_base_port: {port}
"""


@pytest.fixture(scope="module")
def installed(built: Path, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("role-install") / "collections"
    subprocess.run(
        [tool("ansible-galaxy"), "collection", "install", "--force", str(built), "-p", str(path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return path


def play(root: Path, collections: Path, state: str) -> dict[str, int]:
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(root / "ansible-tmp"),
    )
    if any(WHEELHOUSE.glob("*.whl")):  # offline from make setup's wheelhouse, else the index
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=/usr/bin/python3",
            "play.yml",
            "-e",
            f"state={state}",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    recap = re.search(r"localhost\s+:\s+(.*)", proc.stdout.split("PLAY RECAP")[-1])
    assert recap, proc.stdout[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_kb_role_installs_the_shipped_sources(installed, tmp_path):
    base, venv, port = tmp_path / "base", tmp_path / "opt" / "venv", support.free_port()
    (tmp_path / "play.yml").write_text(PLAY.format(base=base, venv=venv, port=port))
    try:
        first = play(tmp_path, installed, "started")
        assert first["failed"] == 0 and first["changed"] >= 3
        # the sources came from the installed tarball (MANIFEST.json), not from the checkout
        assert (tmp_path / "opt" / "src" / "MANIFEST.json").is_file()
        probe = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import qonnect, ansible_collections.qonnect.core as c; print(c.__path__[0])",
            ],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin"},
            check=True,
        )
        assert Path(probe.stdout.strip()).is_relative_to(venv)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert json.load(resp)["status"] == "ok"

        again = play(tmp_path, installed, "started")
        assert again["changed"] == 0 and again["failed"] == 0
    finally:
        script = base / "kb" / "run.sh"
        if script.exists():
            subprocess.run([str(script), "stop"], capture_output=True, timeout=60, check=False)
