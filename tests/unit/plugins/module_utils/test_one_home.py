"""One home per concept (docs/architecture.md): the label keys, the scorer names and quantity
parsing are defined once and imported everywhere else, so no copy can drift."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ansible_collections.qonnect.core.plugins.module_utils import keys, scorers

ROOT = Path(__file__).resolve().parents[4]
CODE = [p for base in ("plugins", "services/qonnect", "benchmarks") for p in (ROOT / base).rglob("*.py")]
PRODUCT = [p for p in CODE if "benchmarks" not in p.parts]  # benchmarks/deploy.py and agent.py play
# a user's plain script, with the labels a user would write
KEY = re.compile(r"^qonnect\.io/[a-z][a-z-]*$")


def constants(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


def test_every_label_key_is_defined_only_in_keys():
    home = Path(keys.__file__).resolve()
    defined = {v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str) and v != keys.PREFIX}
    assert keys.APP_LABEL in defined and keys.TIER_LABEL in defined
    copies = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.value}"
        for p in PRODUCT
        if p.resolve() != home
        for n in constants(p)
        if KEY.match(n.value)
    ]
    assert copies == [], "define label keys in plugins/module_utils/keys.py and import them"


def test_scorer_names_have_one_registry():
    from ansible_collections.qonnect.core.plugins.module_utils import args_common, placement

    assert placement.SCORERS is scorers.SCORERS
    spec = next(
        v for v in vars(args_common).values() if isinstance(v, dict) and isinstance(v.get("scorer"), dict)
    )["scorer"]
    assert tuple(spec["choices"]) == scorers.SCORERS and spec["default"] == scorers.DEFAULT_SCORER
    from ansible_collections.qonnect.core.plugins.module_utils.placement.engine import scorer_registry

    registry = scorer_registry()
    assert set(registry) == set(scorers.SCORERS) and all(callable(f) for f in registry.values())
    listed = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in CODE
        if p.name != "scorers.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and {getattr(e, "value", None) for e in node.elts} >= set(scorers.SCORERS)
    ]
    assert listed == [], "list the scorers from module_utils/scorers.py"


def test_quantities_are_parsed_in_one_place():
    defs = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"
        for p in CODE
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef)
        and node.name in ("parse_quantity", "quantity", "_quantity")
        and p.name != "quantity.py"
    ]
    # the callers may keep a thin wrapper that only maps bad input; none holds a suffix table
    for p in CODE:
        if p.name == "quantity.py":
            continue
        text = p.read_text()
        assert not re.search(r"""["']Ki["']\s*:\s*(1024|2\s*\*\*\s*10)""", text), (
            f"{p}: a quantity suffix table"
        )
    assert all("quantity" in d for d in defs)
