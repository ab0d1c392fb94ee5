"""The QoS spec package: ``qos`` keeps the public names everything imports, each from one home,
and its modules import module_utils only the way AnsiballZ can pack (static, absolute)."""

from __future__ import annotations

import ast
from pathlib import Path

from ansible_collections.qonnect.core.plugins.module_utils import qos
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    checks,
    load,
    model,
    native,
    qonnect_format,
    resources,
)

PACKAGE = Path(qos.__file__).parent
PREFIX = "ansible_collections.qonnect.core.plugins.module_utils"
# what other modules, the KB, the controller, the benchmarks and the tests import from qos
IMPORTED = {
    "API_VERSION": model,
    "CRITERIA": model,
    "TIERS": model,
    "Application": model,
    "Service": model,
    "QosSpecError": model,
    "load_application": load,
    "load_application_file": load,
    "read_spec": load,
    "QONNECT_API_VERSION": qonnect_format,
    "QONNECT_BUNDLES": qonnect_format,
    "QONNECT_PLACEHOLDERS": qonnect_format,
    "substitute": qonnect_format,
    "SELECTOR_OPERATORS": native,
    "finite_quantity": resources,
    "label_key_problem": checks,
}


def test_facade_reexports_each_name_from_its_home():
    for name, home in IMPORTED.items():
        assert getattr(qos, name) is getattr(home, name), name
    assert set(qos.__all__) >= set(IMPORTED)
    assert all(hasattr(qos, name) for name in qos.__all__)


def test_module_utils_imports_are_static_and_absolute():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "__import__", path.name
        text = path.read_text()
        assert "importlib" not in text, path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "module_utils" in node.module:
                assert node.module.startswith(PREFIX), f"{path.name}: {node.module}"


def test_both_formats_load_through_the_facade():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    native_app = qos.load_application(
        {
            "apiVersion": qos.API_VERSION,
            "kind": "Application",
            "metadata": {"name": "a"},
            "spec": {"services": [{"name": "s", "manifests": [pod]}]},
        }
    )
    assert isinstance(native_app, qos.Application)
    assert native_app.source_format == qos.API_VERSION
    qonnect_app = qos.load_application(
        {
            "apiVersion": qos.QONNECT_API_VERSION,
            "kind": "Application",
            "metadata": {"name": "a", "qos": {"energy": 0.5}},
            "spec": {"cloud_svc": [pod]},
        }
    )
    assert [s.name for s in qonnect_app.services] == ["cloud-svc"]
    assert qonnect_app.objective["energy"] == 0.5
