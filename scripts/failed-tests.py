"""Print the failed and errored tests of a pytest JUnit XML report, one line each.

`make test` prints pytest's output before the checks' long log; this puts the names of the failed
tests last, where a CI page that keeps only the tail still shows them.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def failed(report: Path) -> list[str]:
    """`module::test - first line of the message` for every failure or error in ``report``."""
    lines = []
    for case in ET.parse(report).iter("testcase"):
        for outcome in case:
            if outcome.tag in ("failure", "error"):
                message = (outcome.get("message") or "").strip().splitlines()
                first = message[0][:300] if message else ""
                lines.append(f"{outcome.tag.upper()} {case.get('classname')}::{case.get('name')} - {first}")
    return lines


def main(argv: list[str]) -> int:
    report = Path(argv[1] if len(argv) > 1 else "build/pytest.xml")
    if not report.is_file():
        print(f"make test: no pytest report at {report}")
        return 0
    lines = failed(report)
    print(f"make test: {len(lines)} failed test(s) (from {report}):")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
