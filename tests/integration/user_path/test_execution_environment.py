"""Issue 14.2: the execution environment builds from the tarball with lean requirements.

No container engine here, so the check is what `ansible-builder build` would run: `ansible-builder
create` must produce a build context holding the built tarball and the lean requirements, and
those requirements installed into a fresh venv (with only ansible-core beside them) must run the
modules and the inventory plugin from the collection installed out of the tarball.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import support
import yaml
from user_path_support import ROOT, tool

# what only the qonnect services need (cryptography, aiohttp and pydantic also come with
# ansible-core and kubernetes, so they say nothing about leanness)
SERVER_STACK = (
    "fastapi",
    "uvicorn",
    "psycopg",
    "psycopg-binary",
    "pysyncobj",
    "kubernetes-validate",
    "qonnect",
    "jsonschema",
    "ansible-runner",
)


def requirement_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(
                line.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
            )
    return names


def create(tmp_path: Path, built: Path) -> Path:
    """ansible-builder create from a copy of the EE files with the tarball where `make ee` puts it."""
    src = tmp_path / "ee"
    (src / "build" / "ee").mkdir(parents=True)
    shutil.copy(ROOT / "execution-environment.yml", src)
    shutil.copy(ROOT / "bindep.txt", src)
    shutil.copytree(ROOT / "meta", src / "meta")
    shutil.copy(built, src / "build" / "ee" / "qonnect-core.tar.gz")
    run = support.run(
        [
            tool("ansible-builder"),
            "create",
            "-f",
            "execution-environment.yml",
            "-c",
            "context",
            "--output-filename",
            "Containerfile",
        ],
        cwd=src,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return src / "context"


def test_builder_context_installs_the_tarball_with_lean_requirements(tmp_path, built):
    ctx = create(tmp_path, built)
    containerfile = (ctx / "Containerfile").read_text()
    assert "COPY _build /build" in containerfile and "ansible-galaxy collection install" in containerfile
    galaxy = yaml.safe_load((ctx / "_build" / "requirements.yml").read_text())
    assert galaxy["collections"] == [{"name": "/build/collections/qonnect-core.tar.gz", "type": "file"}]
    assert (ctx / "_build" / "collections" / "qonnect-core.tar.gz").read_bytes() == built.read_bytes()
    names = requirement_names((ctx / "_build" / "requirements.txt").read_text())
    assert names == {"kubernetes", "pyyaml", "jmespath", "numpy", "highspy"}
    assert not names & set(SERVER_STACK)


@pytest.mark.slow  # a fresh venv from the package index: minutes on a busy machine
def test_ee_requirements_in_a_fresh_venv_run_the_modules(tmp_path, built):
    ctx = create(tmp_path, built)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
    py = venv / "bin" / "python"
    import ansible  # the same ansible-core the project tests, as the EE's ansible_core pins a range

    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run = support.run(
        [*pip, f"ansible-core=={ansible.__version__}", "-r", str(ctx / "_build" / "requirements.txt")],
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    listed = support.run([str(py), "-m", "pip", "list", "--format", "json"]).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert not installed & set(SERVER_STACK), installed & set(SERVER_STACK)

    collections = tmp_path / "collections"
    bin_ = venv / "bin"
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
    }
    subprocess.run(
        [
            str(bin_ / "ansible-galaxy"),
            "collection",
            "install",
            "-p",
            str(collections),
            str(ctx / "_build" / "collections" / "qonnect-core.tar.gz"),
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    installed_root = collections / "ansible_collections" / "qonnect" / "core"
    book = tmp_path / "plan.yml"
    book.write_text(f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Plan Bookinfo on QONNECT's nine clusters from an inventory file (no KB)
      qonnect.core.placement:
        src: {installed_root}/examples/bookinfo/energy-first.yml
        inventory: "{{{{ lookup('ansible.builtin.file', '{installed_root}/examples/inventories/paper.json') | from_json }}}}"
        scorer: optimal
      register: planned
    - ansible.builtin.copy:
        content: "{{{{ planned.plan | to_json }}}}"
        dest: {tmp_path}/plan.json
        mode: "0600"
""")
    run = support.run(
        [str(bin_ / "ansible-playbook"), str(book)], env=env, cwd=tmp_path, timeout=300, check=False
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["scorer"] == "optimal" and plan["services"]
    assert all(entries and entries[0]["cluster"] for entries in plan["services"].values())
    doc = support.run(
        [str(bin_ / "ansible-doc"), "-t", "inventory", "qonnect.core.kb"], env=env, timeout=120, check=False
    )
    assert doc.returncode == 0 and "python_interpreter" in doc.stdout
