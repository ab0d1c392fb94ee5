"""The nine-cluster paper testbed has one source: examples/inventories/paper.json is generated
from testbed/qonnect_testbed/profiles/paper.yml (``python -m qonnect_testbed.inventory paper``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from qonnect_testbed import fleet, inventory

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "inventories" / "paper.json"


def test_the_example_inventory_is_the_paper_profile():
    profile = fleet.expand(fleet.load("paper"))
    example = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert example == inventory.inventory(profile)
    # every latency pair, both ways, and every cluster's nodes come from the profile
    assert example["latency_ms"] == profile.latency_ms
    assert sum(len(row) for row in example["latency_ms"].values()) == 81
    assert EXAMPLE.read_text(encoding="utf-8") == inventory.render(profile), (
        "regenerate: python -m qonnect_testbed.inventory paper > examples/inventories/paper.json"
    )


def test_the_generator_writes_the_file_and_names_a_bad_profile(tmp_path: Path):
    run = subprocess.run(
        [sys.executable, "-m", "qonnect_testbed.inventory", "paper"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == EXAMPLE.read_text(encoding="utf-8")
    bad = tmp_path / "bad.yml"
    bad.write_text("generate: {clusters: 0}\n")
    run = subprocess.run(
        [sys.executable, "-m", "qonnect_testbed.inventory", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2 and "generate.clusters" in run.stderr and "Traceback" not in run.stderr
