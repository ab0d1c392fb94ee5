"""The product and the testbed stand apart (issue 38): the product's code never imports the
testbed (the demo drives it through its commands), and the testbed never imports the product's
command line (it has its own error type and entry point)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _offenders(package: Path, forbidden) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        for line, name in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if forbidden(name):
                out.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return out


def test_the_product_does_not_import_the_testbed():
    offenders = _offenders(ROOT / "services" / "qonnect", lambda n: n.split(".")[0] == "qonnect_testbed")
    assert offenders == []


def test_the_testbed_does_not_import_the_product():
    offenders = _offenders(ROOT / "testbed" / "qonnect_testbed", lambda n: n.split(".")[0] == "qonnect")
    assert offenders == []


def test_the_checks_see_an_import_when_there_is_one(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    from qonnect.cli import UserError\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _offenders(tmp_path, lambda n: n.split(".")[0] == "qonnect") == ["m.py:2 imports qonnect.cli"]
    finally:
        ROOT = saved


def test_testbed_errors_are_printed_without_a_traceback(tmp_path):
    """Through the product's CLI (the component declares its error type) and on its own."""
    missing = tmp_path / "nothing-here"
    for argv in (
        [sys.executable, "-c", "import sys; from qonnect.cli import main; sys.exit(main())", "testbed"],
        [sys.executable, "-m", "qonnect_testbed"],
    ):
        done = subprocess.run(
            [*argv, "status", "--dir", str(missing)], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2, done.stderr
        assert "no testbed is running in" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_binaries_command_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("QONNECT_KUBE_BIN", str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "qonnect_testbed", "binaries"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"QONNECT_KUBE_BIN={tmp_path}: missing etcd, kube-apiserver" in done.stderr
    assert "Traceback" not in done.stderr
