"""benchmarks/placement.py --survivability checks itself (issue 37). Here, not beside the
what-if's unit tests: ansible-test runs those on the built collection, which has no benchmarks.

It runs as users run it, in a process of its own: its 2 workers are forked, and a fork inside a
pytest-xdist worker (which has threads) can hang (it did once in CI, past 600 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_survivability_benchmark_runs_and_checks_itself():
    """On a small fleet: the incremental report after the loss reaches the full recompute's
    verdicts, with fewer scenarios planned, in one process and in 2 forked workers."""
    args = ["--survivability", "--runs", "1", "--clusters", "30", "--nodes", "2", "--apps", "15"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "placement.py"), *args, "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["scenarios"] == 30 and row["incremental_verdicts_equal_full"]
    assert row["incremental_scenarios_planned"] <= row["full_recompute_scenarios_planned"]
    assert {"full_w1", "full_w2", "incremental_w1", "incremental_w2"} <= set(row["seconds"])
    assert row["rss_peak_mb"] > 0 and row["report_traced_peak_mb"] > 0
