"""Build the qonnect wheel with the qonnect.core collection inside it.

The collection's ``plugins/module_utils`` is the one home of the QoS model, the placement engine,
the KB client and the Kubernetes deployer; the services import it by its collection name,
``ansible_collections.qonnect.core.plugins.module_utils``. So that a plain ``pip install`` gives a
host everything it runs, the wheel carries the collection (this directory's parent: a checkout or
an installed collection) at ``site-packages/ansible_collections/qonnect/core``, where plain Python
imports it and Ansible finds it (collections on ``sys.path``, as the ``ansible`` package ships
its collections). Editable installs (``make setup``) link the checkout there instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

COLLECTION = Path(__file__).resolve().parent.parent
# What the services and the controller's playbook runs need; docs, tests and examples stay in
# the collection tarball.
PARTS = ("plugins", "playbooks", "roles", "meta")
IDENTITY = ("MANIFEST.json", "galaxy.yml")  # installed collection / source checkout
TARGET = Path("ansible_collections", "qonnect", "core")


def collection_root() -> Path:
    """The collection around services/, or a clear error when built from elsewhere."""
    if not any((COLLECTION / name).is_file() for name in IDENTITY):
        raise SystemExit(
            f"qonnect: {COLLECTION} is not the qonnect.core collection (no MANIFEST.json or "
            "galaxy.yml); build the wheel from the collection's services/ directory"
        )
    return COLLECTION


class build_with_collection(build_py):
    """build_py that also copies the collection into the build tree."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = collection_root()
        dest = Path(self.build_lib) / TARGET
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in PARTS:
            if (root / part).is_dir():
                shutil.copytree(root / part, dest / part, ignore=ignore)
        for name in IDENTITY:
            if (root / name).is_file():
                shutil.copy2(root / name, dest / name)


setup(cmdclass={"build_py": build_with_collection})
