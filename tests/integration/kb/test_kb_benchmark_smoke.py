"""benchmarks/kb.py runs end to end on a small load and prints what docs/benchmarks.md renders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_kb_benchmark_measures_a_small_load_on_sqlite() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "kb.py"),
            "--json",
            "--backends",
            "sqlite",
            "--agents",
            "20",
            "--rate",
            "40",
            "--duration",
            "2",
            "--warmup",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)["results"]["sqlite"]
    (measured,) = result["runs"]
    assert result["errors"] == 0 and measured["requests"] >= 60  # 40/s for 2 s, give or take phases
    assert len(measured["p99_ms_by_second"]) == 2
    # steal time of each measured second: present and a share
    assert len(measured["steal_pct_by_second"]) == 2
    assert all(0.0 <= pct <= 100.0 for pct in measured["steal_pct_by_second"])
    assert result["server_cpu_ms_per_request"] > 0 and result["kb_log_lines"] == 0
