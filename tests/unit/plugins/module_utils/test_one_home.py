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


def _source_copies(test, js: re.Pattern, homes: tuple[str, ...]) -> list[str]:
    """Places in the product's Python (by AST) and web UI (by pattern) that match, outside homes."""
    found = []
    for p in PRODUCT:
        if p.name in homes:
            continue
        tree = ast.parse(p.read_text(), str(p))
        found += [f"{p.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree) if test(n)]
    for p in (ROOT / "services/qonnect").rglob("*.js"):
        found += [
            f"{p.relative_to(ROOT)}:{i}"
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if js.search(line)
        ]
    return found


def test_free_capacity_has_one_definition():
    from ansible_collections.qonnect.core.plugins.module_utils.placement.model import Inventory, free_capacity

    def subtracts_requested(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Sub)
            and "requested" in ast.unparse(node.right)
        )

    copies = _source_copies(subtracts_requested, re.compile(r"allocatable\.\w+\s*-"), ("model.py",))
    assert copies == [], "use placement/model.py free_capacity (Cluster.free) or the KB inventory's free"

    def node(name: str, cpu: float, **facts) -> dict:
        return {"name": name, "allocatable": {"cpu": cpu}, "requested": {"cpu": 1}, **facts}

    cluster = {
        "name": "c",
        "tier": "edge",
        "nodes": [
            node("worker", 4),
            node("down", 8, ready=False),
            node("cordoned", 8, schedulable=False),
            node("silent", 8, heartbeat_age=60.0),
            node("pressured", 8, pressure={"memory": True}),
            node(
                "control-plane",
                8,
                taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
            ),
            node("preferred", 2, taints=[{"key": "spot", "effect": "PreferNoSchedule"}]),
        ],
    }
    assert free_capacity(cluster)["cpu"] == 3 + 1  # the worker and the PreferNoSchedule node only
    assert Inventory.from_dict({"clusters": [cluster]}).clusters[0].facts()["free"] == free_capacity(cluster)


def test_where_an_application_runs_has_one_definition():
    from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

    def current_or_desired(node: ast.AST) -> bool:
        text = ast.unparse(node) if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) else ""
        return "current" in text and "desired" in text

    copies = _source_copies(current_or_desired, re.compile(r"current\s*\|\|.*desired"), ("model.py",))
    assert copies == [], "use placement/model.py current_placement (or the KB inventory's placements)"
    assert current_placement({"current": {"a": 1}, "desired": {"b": 2}}) == {"a": 1}
    assert current_placement({"current": None, "desired": {"b": 2}}) == {"b": 2}
    assert current_placement(None) == {}


def test_credentials_broken_has_one_definition():
    """The KB's inventory flag and the controller's judgement are one rule (issue 38, item 4)."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import model

    def defines_it(node: ast.AST) -> bool:
        names = ("credentials_broken", "CREDENTIALS_ERRORS")
        if isinstance(node, ast.FunctionDef):
            return node.name in names
        return isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets)

    home = Path(model.__file__).resolve()
    copies = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in PRODUCT
        if p.resolve() != home
        for n in ast.walk(ast.parse(p.read_text(), str(p)))
        if defines_it(n)
    ]
    assert copies == [], "import credentials_broken from placement/model.py"
    assert model.credentials_broken({"reachable": True, "error": "forbidden: list nodes"})
    assert not model.credentials_broken({"reachable": False, "error": "forbidden: list nodes"})
