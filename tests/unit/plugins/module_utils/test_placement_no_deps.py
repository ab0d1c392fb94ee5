"""module_utils must import with the standard library only and fail clearly when used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"numpy", "yaml", "jmespath", "highspy"}:
                raise ImportError("blocked " + name)

    sys.meta_path.insert(0, Block())
    from ansible_collections.qonnect.core.plugins.module_utils.qos import (
        QosSpecError, load_application)
    from ansible_collections.qonnect.core.plugins.module_utils.placement import place

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    app = load_application({"apiVersion": "qonnect.io/v1", "kind": "Application",
                            "metadata": {"name": "a"},
                            "spec": {"services": [{"name": "s", "manifests": [pod]}]}})
    print("dict spec ok", app.services[0].name)
    try:
        load_application("apiVersion: qonnect.io/v1")
    except QosSpecError as exc:
        print(exc.errors[0])
    try:
        place(app, {"clusters": []})
    except ImportError as exc:
        print(exc)
""")


def _env() -> dict[str, str]:
    """The child imports the collection as plain Python: from site-packages in the project's venv,
    from the copy's ansible_collections/ parent under ansible-test."""
    env = dict(os.environ)
    here = Path(__file__).resolve()
    if here.parents[6].name == "ansible_collections":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(here.parents[7]), env.get("PYTHONPATH")]))
    return env


def test_imports_and_clear_errors_without_third_party_packages():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True, env=_env()
    ).stdout.splitlines()
    assert out == [
        "dict spec ok s",
        "PyYAML is required to read YAML: install it with 'pip install PyYAML'",
        "the placement engine needs numpy: install it with 'pip install numpy'",
    ]
