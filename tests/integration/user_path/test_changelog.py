"""The changelog docs/operations.md points to: CHANGELOG.rst exists, matches changelogs/changelog.yaml
as antsibull-changelog renders it, and every fragment is valid (`make changelog` can release)."""

from __future__ import annotations

import support
from user_path_support import ROOT, tool


def test_every_fragment_is_valid():
    run = support.run([tool("antsibull-changelog"), "lint"], cwd=ROOT, timeout=120, check=False)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_changelog_rst_is_rendered_from_changelog_yaml(tmp_path):
    out = tmp_path / "CHANGELOG.rst"
    run = support.run(
        [tool("antsibull-changelog"), "generate", "--output", str(out), "--output-format", "rst"],
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    shipped = (ROOT / "CHANGELOG.rst").read_text()
    assert shipped == out.read_text()
    assert "v0.1.0" in shipped and "New Modules" in shipped
    assert "CHANGELOG.rst" in (ROOT / "docs" / "operations.md").read_text()
