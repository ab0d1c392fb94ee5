"""benchmarks/report.py: saved benchmark outputs -> docs page with charts; missing ones say so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[3] / "benchmarks" / "report.py"
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.timeout(120)

# Outputs in the shapes the benchmarks print (placement: JSON lines; kb and failover: one object).
PLACEMENT = [
    {
        "clusters": 9,
        "services": 6,
        "scorer": s,
        "seconds": t,
        "cpu_seconds": t / 2,
        "objective": 0.75,
        "optimal_objective": 0.76,
        "capacity_violations": 0,
    }
    for s, t in (("weighted", 0.0141), ("borda", 0.0109), ("optimal", 0.2466))
] + [
    {
        "clusters": 100,
        "services": 100,
        "scorer": "weighted",
        "seconds": 0.1503,
        "cpu_seconds": 0.02,
        "objective": 0.7685,
        "optimal_objective": None,
        "capacity_violations": 0,
    }
]
KB = {
    "benchmark": "kb-heartbeats",
    "machine": {"cpus": 2, "loadavg_before": [1, 1, 1], "loadavg_after": [2, 1, 1]},
    "targets": {"sqlite_rate_min": 2000.0},
    "target_met": False,
    "results": {
        "sqlite": {
            "agents": 200,
            "target_rate": 500.0,
            "rate": 390.2,
            "errors": 0,
            "p50_ms": 445.0,
            "p99_ms": 1256.0,
            "max_ms": 1257.0,
            "server_cpu_ms_per_request": 0.287,
        }
    },
}
SPAN = {"n": 2, "p50": 4.25, "p95": 4.9, "max": 4.9, "values": [4.25, 4.9]}
FAILOVER = {
    "trials": 2,
    "detect_seconds": SPAN,
    "recover_seconds": {"n": 2, "p50": 9.75, "p95": 12.0, "max": 12.0, "values": [9.75, 12.0]},
    "reelection_seconds": {"n": 2, "p50": 1.125, "p95": 1.4, "max": 1.4, "values": [1.125, 1.4]},
    "commit_latency_ms": {
        str(n): {"replicas": n, "commits": 30, "p50_ms": n + 0.5, "p95_ms": 2 * n, "max_ms": 3 * n}
        for n in (3, 5, 7)
    },
    "duplicate_migrations": 0,
    "lost_decisions": 0,
    "settings": {"heartbeat_timeout_s": 3.0},
}


def report(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(REPORT),
            "--from",
            str(source),
            "--out",
            str(out / "benchmarks.md"),
            "--img",
            str(out / "img"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def unmeasured(page: str) -> int:
    """Sections that say they have no measurement."""
    return sum(line.startswith("**not measured**") for line in page.splitlines())


def test_every_measured_benchmark_gets_its_numbers_and_chart(tmp_path: Path) -> None:
    source = tmp_path / "results"
    source.mkdir()
    (source / "placement.jsonl").write_text("\n".join(json.dumps(r) for r in PLACEMENT) + "\n")
    (source / "kb.json").write_text(json.dumps(KB, indent=2))
    (source / "failover.json").write_text(json.dumps(FAILOVER))
    (source / "notes.json").write_text('{"something": "else"}')
    run = report(source, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "notes.json: skipped" in run.stderr
    page = (tmp_path / "benchmarks.md").read_text()
    for chart in ("failover-timeline", "placement-time", "kb-throughput", "raft-commit-latency"):
        assert f"](img/{chart}.png)" in page
        assert (tmp_path / "img" / f"{chart}.png").read_bytes()[:8] == PNG
    assert "| 100 | 100 | weighted | 0.1503 |" in page
    assert "borda at 100x100, optimal at 100x100: **not measured**" in page
    assert "| sqlite | 1 | 200 | 500 | 1 | 390.2 | 390.2 | 0.78 | 0 | 445 | 1256 | 1256 |" in page
    assert "| failure -> decision in KB | 2 | 4.25 | 4.9 | 4.9 |" in page
    assert "| leader killed -> new leader | 2 | 1.125 | 1.4 | 1.4 |" in page
    assert "| 7 | 30 | 7.5 | 14 | 21 |" in page
    assert unmeasured(page) == 2  # deploy, testbed
    assert "are **not measured** separately" in page  # the phases inside the measured spans
    assert (
        "## Deploy" in page and "python benchmarks/deploy.py --json > benchmarks/results/deploy.json" in page
    )


def test_nothing_measured_invents_nothing_and_removes_old_charts(tmp_path: Path) -> None:
    source = tmp_path / "empty"
    source.mkdir()
    (tmp_path / "img").mkdir()
    stale = tmp_path / "img" / "kb-throughput.png"
    stale.write_bytes(PNG)
    run = report(source, tmp_path)
    assert run.returncode == 0, run.stderr
    page = (tmp_path / "benchmarks.md").read_text()
    assert unmeasured(page) == 6
    assert "Measured here: nothing yet." in page and ".png" not in page
    assert not stale.exists()


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    run = report(tmp_path / "missing", tmp_path)
    assert run.returncode == 2 and "--from:" in run.stderr and "is not a folder" in run.stderr
    run = report(tmp_path, tmp_path, "--run", "placement,nonsense")
    assert run.returncode == 2 and "--run: unknown benchmark nonsense" in run.stderr
