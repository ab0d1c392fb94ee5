"""module_utils must import with the standard library only and fail clearly when used."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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


def test_imports_and_clear_errors_without_third_party_packages():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == [
        "dict spec ok s",
        "PyYAML is required to read YAML: install it with 'pip install PyYAML'",
        "the placement engine needs numpy: install it with 'pip install numpy'",
    ]
