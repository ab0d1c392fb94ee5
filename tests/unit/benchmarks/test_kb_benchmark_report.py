"""benchmarks/report.py renders multi-run, multi-instance KB results (once hand-written) and
`--section kb` rewrites only the KB section of an existing page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run(
    p99s: list[float],
    rates: list[float],
    instances: int,
    backend: str,
    database_cpu: float | None = None,
    steal: bool = False,
) -> dict:
    runs = [
        {
            "agents": 10_000,
            "target_rate": 5000.0,
            "rate": rate,
            "errors": 0,
            "p50_ms": 20.0,
            "p99_ms": p99,
            "max_ms": p99 + 1,
            "server_cpu_ms_per_request": 0.3,
            "loadgen_cpu_ms_per_request": 0.05,
            "loadavg": [1.5, 2.5],
            "steal_pct_by_second": [1.0, 2.0, 9.5] if steal else [],
        }
        for p99, rate in zip(p99s, rates, strict=True)
    ]
    return {
        "benchmark": "kb-heartbeats",
        "command": "python benchmarks/kb.py --json --runs 3",
        "machine": {"cpus": 2, "python": "3.11", "loadavg_before": [1, 1, 1], "loadavg_after": [2, 1, 1]},
        "targets": {"postgresql_p99_ms_max": 100.0, "postgresql_rate_min": 5000.0},
        "target_met": {backend: False},
        "results": {
            backend: {
                "instances": instances,
                "agents": 10_000,
                "target_rate": 5000.0,
                "rate": min(rates),
                "errors": 0,
                "p50_ms": 20.0,
                "p99_ms": max(p99s),
                "runs": runs,
                "server_cpu_ms_per_request": 0.3,
                "database_cpu_ms_per_request": database_cpu,
            }
        },
    }


def test_every_kb_output_is_rendered_with_instances_medians_and_ratios(tmp_path: Path) -> None:
    source = tmp_path / "results"
    source.mkdir()
    (source / "kb-a.json").write_text(
        json.dumps(
            _run([90.0, 250.0, 80.0], [5000.0, 4100.0, 4990.0], 2, "postgresql", database_cpu=0.1, steal=True)
        )
    )
    (source / "kb-b.json").write_text(json.dumps(_run([40.0], [5000.0], 1, "postgresql")))
    page = tmp_path / "benchmarks.md"
    page.write_text(
        "# Benchmarks\n\n## Before\n\nkept\n\n## Knowledge Base throughput (agent reports)\n\nold\n\n## After\n\nkept too\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "report.py"),
            "--from",
            str(source),
            "--out",
            str(page),
            "--img",
            str(tmp_path / "img"),
            "--section",
            "kb",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    text = page.read_text()
    # 2 instances, 3 runs: median 4990/s, lowest 4100 (0.82 of offered), p99 median 90, worst 250 (2.5x target)
    assert (
        "| postgresql | 2 | 10000 | 5000 | 3 | 4990 | 4100 | 0.82 | 0 | 20 | 90 | 250 | 90.0, 250.0, 80.0 | 100 | 2.5 "
        "| 0.3 | 0.1 | 0.05 | 1.5->2.5, 1.5->2.5, 1.5->2.5 | 4.2 (9.5), 4.2 (9.5), 4.2 (9.5) | False |"
        in text
    )  # steal time: the mean and the worst second of each run
    assert (
        "| postgresql | 1 | 10000 | 5000 | 1 | 5000 | 5000 | 1 | 0 | 20 | 40 | 40 | 40.0 | 100 | 0.4 | 0.3 | - |"
        " 0.05 | 1.5->2.5 | - | False |" in text  # no database CPU or steal measured: "-"
    )
    assert text.index("### kb-a") < text.index("### kb-b")
    assert "python benchmarks/kb.py --json --runs 3" in text and '"postgresql_p99_ms_max": 100.0' in text
    # only the KB section changed
    assert "old" not in text.split("## After")[0].split("## Knowledge Base")[1]
    assert text.startswith("# Benchmarks\n\n## Before\n\nkept\n") and text.endswith("## After\n\nkept too\n")
