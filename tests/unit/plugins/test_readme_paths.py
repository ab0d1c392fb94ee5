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


def test_readme_opens_with_the_users_path_and_says_what_own_clusters_need():
    """Issue 34.8: install and use first, developer targets after; a short "bring your own
    clusters" section names the federation file, the node labels and the DNS, and links to the
    operations guide for the details."""
    assert README.index("## Use it with your clusters") < README.index("make demo   #")
    assert README.index("## Use it with your clusters") < README.index("make test   #")
    byo = README.split("### Bring your own clusters", 1)[1].split("\n## ", 1)[0]
    for needle in (
        "federation_file",
        "qonnect.io/energy-kwh",
        "qonnect.io/price-eur-h",
        "qonnect.io/bandwidth-gbps",
        "ExternalName",
        "qonnect.io/service-domain",
        "docs/operations.md#2-member-clusters-kind-k3d-k3s-any-kubernetes",
        "docs/operations.md#cross-cluster-addresses",
    ):
        assert needle in byo, needle
