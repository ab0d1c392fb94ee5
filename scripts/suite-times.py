"""Per-suite test counts and seconds from pytest's JUnit XML (``make test`` writes
build/pytest.xml), as the table docs/operations.md quotes: one row per suite (tests/unit,
tests/conformance, each tests/integration/<dir>), the tests' own seconds summed (on several
workers they wait in parallel, so the sum is more than the wall time), and the run's wall time.

    python3 scripts/suite-times.py build/pytest.xml [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def suite_of(case: ET.Element) -> str:
    """tests/integration/kb/test_x.py -> integration/kb; tests/unit/... -> unit."""
    path = case.get("file") or (case.get("classname") or "").replace(".", "/")
    parts = [p for p in Path(path).parts if p != "tests"]
    if not parts:
        return "?"
    if parts[0] == "integration" and len(parts) > 2:
        return f"integration/{parts[1]}"
    return parts[0].removesuffix(".py")


def read(path: str) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    rows: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "failed": 0})
    for case in root.iter("testcase"):
        row = rows[suite_of(case)]
        row["tests"] += 1
        row["seconds"] += float(case.get("time") or 0.0)
        if case.find("failure") is not None or case.find("error") is not None:
            row["failed"] += 1
    wall = sum(float(s.get("time") or 0.0) for s in suites)
    return {
        "wall_seconds": round(wall, 1),
        "suites": {k: rows[k] for k in sorted(rows, key=lambda k: -rows[k]["seconds"])},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("xml")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = read(args.xml)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print("| suite | tests | seconds |")
    print("|---|---|---|")
    for name, row in found["suites"].items():
        print(f"| {name} | {row['tests']:,} | {row['seconds']:,.0f} |")
    total = sum(r["tests"] for r in found["suites"].values())
    print(f"\n{total:,} tests, wall {found['wall_seconds'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
