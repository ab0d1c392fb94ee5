"""Issue 24.4: the install paths the README and the requirements files give exist.

The README finds the installed collection (``$coll``) instead of hard-coding
~/.ansible/collections; every ``$coll/...`` path it names is a file or directory the collection
ships, and no file points at the old ``controller/`` name of ``services/``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
SHIPPED = ("README.md", "requirements.txt", "meta/ee-requirements.txt", "docs/operations.md")
# a development file (galaxy.yml build_ignore): checked in the checkout, absent from the tarball
DEVELOPMENT = tuple(n for n in ("test-requirements.txt",) if (ROOT / n).exists())


def test_readme_does_not_hard_code_where_the_collection_is_installed():
    assert "~/.ansible/collections/ansible_collections" not in README
    assert "ansible-galaxy collection list qonnect.core --format json" in README


def test_every_collection_path_in_the_readme_exists():
    paths = set(re.findall(r"\$coll/([\w./-]+)", README))
    assert {"meta/ee-requirements.txt", "services"} <= paths, paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []


def test_the_services_package_installs_from_services():
    assert (ROOT / "services" / "pyproject.toml").is_file()
    for name in SHIPPED + DEVELOPMENT:
        text = (ROOT / name).read_text()
        assert not re.search(r"core/controller\b|\./controller\b|-e controller\[", text), name


def test_readme_keeps_its_two_commands():
    assert "make demo   #" in README and "make test   #" in README


def test_readme_says_how_to_get_the_first_admin_token():
    assert "qonnect kb token create" in README and "--role admin" in README
