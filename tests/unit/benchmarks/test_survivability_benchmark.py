"""benchmarks/placement.py --survivability checks itself (issue 37). Here, not beside the
what-if's unit tests: ansible-test runs those on the built collection, which has no benchmarks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_survivability_benchmark_runs_and_checks_itself():
    """benchmarks/placement.py --survivability on a small fleet: the incremental report after
    the loss reaches the full recompute's verdicts, with fewer scenarios planned."""
    spec = importlib.util.spec_from_file_location("bench_placement", ROOT / "benchmarks" / "placement.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = bench.survivability_bench(runs=1, clusters=30, nodes=2, apps=15, workers=2)
    assert row["scenarios"] == 30 and row["incremental_verdicts_equal_full"]
    assert row["incremental_scenarios_planned"] <= row["full_recompute_scenarios_planned"]
    assert {"full_w1", "full_w2", "incremental_w1", "incremental_w2"} <= set(row["seconds"])
    assert row["rss_peak_mb"] > 0 and row["report_traced_peak_mb"] > 0
