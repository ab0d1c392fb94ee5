"""Count the suite's test functions and the checks they make, so a change that speeds the suite
up can show it lost none (issue 35): `assert` statements, `pytest.raises`/`pytest.fail` calls and
`wait_for(...)` waits (each fails its test when the awaited state never comes).

Usage: python3 scripts/count-assertions.py [TESTS_DIR] [--json]. Compare two commits by running it in each.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

CHECK_CALLS = {"raises", "fail", "wait_for"}


def count(root: Path) -> dict[str, int]:
    totals = {"files": 0, "test_functions": 0, "asserts": 0, "check_calls": 0}
    for path in sorted(root.rglob("*.py")):
        if any(part in {".venv", "output", "__pycache__"} for part in path.parts):
            continue
        tree = ast.parse(path.read_text(), str(path))
        totals["files"] += 1
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                totals["test_functions"] += 1
            elif isinstance(node, ast.Assert):
                totals["asserts"] += 1
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                totals["check_calls"] += name in CHECK_CALLS
    return totals


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    root = Path(args[0] if args else Path(__file__).resolve().parents[1] / "tests")
    totals = count(root)
    if "--json" in argv:
        print(json.dumps(totals))
    else:
        print(" ".join(f"{k}={v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
