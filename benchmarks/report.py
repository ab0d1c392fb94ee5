"""Gather every benchmark's JSON output into docs/benchmarks.md, with charts in docs/img/.

Reads saved outputs (``*.json`` / ``*.jsonl`` under ``--from``, default benchmarks/results/;
each file is recognised by its content) or, with ``--run``, first runs the quick variant of each
benchmark with ``--json`` and saves its output there. A benchmark without output is reported as
"not measured", never estimated.

    python benchmarks/report.py                       # from benchmarks/results/
    python benchmarks/report.py --run placement,kb    # run these quick variants first
    python benchmarks/report.py --from /tmp/results --out /tmp/benchmarks.md
    python benchmarks/report.py --from /tmp/kb --section kb  # only the KB section of the docs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUICK = {  # benchmark -> (arguments of its quick variant, output file, seconds allowed)
    "placement": (["--json", "--quick"], "placement.jsonl", 900),
    "kb": (
        ["--json", "--backends", "sqlite", "--agents", "200", "--rate", "500", "--duration", "5"],
        "kb.json",
        600,
    ),
    "failover": (["--json", "--quick"], "failover.json", 1800),
    "deploy": (["--json"], "deploy.json", 900),
    "testbed": (
        ["--json", "--clusters", "20", "--nodes", "5", "--pods", "200", "--runs", "10"],
        "testbed.json",
        900,
    ),
}
NOT_MEASURED = "not measured"


# -- input ---------------------------------------------------------------------------------------


def run_quick(names: list[str], results: Path) -> dict[str, str]:
    """Run each named benchmark's quick variant; its JSON goes to results/. Returns failures."""
    results.mkdir(parents=True, exist_ok=True)
    failed = {}
    for name in names:
        args, out, limit = QUICK[name]
        print(f"report: running benchmarks/{name}.py {' '.join(args)}", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args],
                capture_output=True,
                text=True,
                timeout=limit,
                cwd=ROOT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            failed[name] = f"did not finish within {limit} s"
            continue
        if proc.returncode != 0 or not proc.stdout.strip():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            failed[name] = f"exited with {proc.returncode}: {tail}"
            continue
        (results / out).write_text(proc.stdout)
        print(f"report: {name} done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return failed


def load(results: Path) -> dict[str, Any]:
    """Every recognised benchmark output under ``results``, by benchmark name."""
    found: dict[str, Any] = {}
    for path in sorted([*results.glob("*.json"), *results.glob("*.jsonl")]):
        text = path.read_text(encoding="utf-8")
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            try:
                docs = [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                print(f"report: {path}: skipped, not JSON or JSON lines ({exc})", file=sys.stderr)
                continue
        rows = [d for d in docs if isinstance(d, dict) and {"clusters", "scorer", "seconds"} <= d.keys()]
        if rows:
            found.setdefault("placement", []).extend(rows)
            continue
        for doc in docs:
            name = kind(doc)
            if name == "kb":
                found.setdefault("kb", []).append((path.stem, doc))
            elif name:
                found[name] = doc
            else:
                print(f"report: {path}: skipped, not the output of a known benchmark", file=sys.stderr)
    return found


def kind(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return None
    if doc.get("benchmark") == "kb-heartbeats":
        return "kb"
    if doc.get("benchmark") in ("deploy", "testbed"):
        return doc["benchmark"]
    if "commit_latency_ms" in doc or "recover_seconds" in doc:
        return "failover"
    return None


# -- charts --------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_failover(doc: dict[str, Any], path: Path) -> bool:
    """The p50 timeline (failure -> decision -> healthy) on top, then each measured span (p50 bar,
    p95 whisker) on the same time axis."""
    steps = [(label, doc.get(key) or {}) for label, key in FAILOVER_STEPS if key != "reelection_seconds"]
    steps = [(label, s) for label, s in steps if s.get("n")]
    if not steps:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 1.6 + 0.55 * len(steps)))
    detect, recover = (doc.get("detect_seconds") or {}), (doc.get("recover_seconds") or {})
    rows = ["timeline (p50)"] if detect.get("n") and recover.get("n") else []
    if rows:
        ax.broken_barh(
            [(0, detect["p50"]), (detect["p50"], max(0.0, recover["p50"] - detect["p50"]))],
            (-0.4, 0.8),
            facecolors=["#d9822b", "#1f7a3a"],
        )
        for x, text in ((0, "failure"), (detect["p50"], "decision"), (recover["p50"], "healthy")):
            ax.annotate(
                text,
                (x, -0.4),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    offset = len(rows)
    for i, (_label, s) in enumerate(steps, start=offset):
        ax.barh(i, s["p50"], color="#6b8fc7")
        ax.errorbar(s["p50"], i, xerr=[[0], [max(0.0, s["p95"] - s["p50"])]], color="black", capsize=3)
        ax.text(max(s["p50"], s["p95"]), i, f"   p50 {s['p50']:.1f} s", va="center", ha="left", fontsize=8)
    ax.set_yticks(range(offset + len(steps)), rows + [label for label, _step in steps])
    ax.set_ylim(offset + len(steps) - 0.5, -1.0)
    timeout = (doc.get("settings") or {}).get("heartbeat_timeout_s")
    if timeout:
        ax.axvline(timeout, color="#b3261e", linestyle="--", linewidth=1)
    ax.set_xlim(0, max(max(s["p50"], s["p95"]) for _label, s in steps) * 1.2)
    ax.set_xlabel(
        "seconds after the failure (bar p50, whisker p95"
        + ("; red line: heartbeat timeout)" if timeout else ")")
    )
    ax.set_title(f"Failover timeline ({steps[0][1]['n']} trials)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


FAILOVER_STEPS = [
    ("failure -> decision in KB", "detect_seconds"),
    ("failure -> healthy elsewhere", "recover_seconds"),
    ("  (leader alive)", "recover_seconds_plain"),
    ("  (leader killed mid-migration)", "recover_seconds_leader_killed"),
    ("leader killed -> new leader", "reelection_seconds"),
]


def chart_placement(rows: list[dict[str, Any]], path: Path) -> bool:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    fleets = sorted({(r["clusters"], r["services"]) for r in rows})
    for scorer in sorted({r["scorer"] for r in rows}):
        mine = sorted(
            (r for r in rows if r["scorer"] == scorer), key=lambda r: (r["clusters"], r["services"])
        )
        ax.plot(
            [fleets.index((r["clusters"], r["services"])) for r in mine],
            [r["seconds"] for r in mine],
            marker="o",
            label=scorer,
        )
    ax.set_xticks(range(len(fleets)), [f"{c}x{s}" for c, s in fleets])
    ax.set_yscale("log")
    ax.set_xlabel("fleet: clusters x services")
    ax.set_ylabel("seconds per plan (median)")
    ax.set_title("Placement time by fleet size and scorer")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def chart_kb(doc: dict[str, Any], path: Path) -> bool:
    results = doc.get("results") or {}
    if not results:
        return False
    plt = _pyplot()
    names = list(results)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.5))
    left.bar(names, [results[n]["rate"] for n in names], 0.5, color="#1a56a8", label="achieved")
    left.scatter(
        names,
        [results[n]["target_rate"] for n in names],
        color="black",
        marker="_",
        s=400,
        label="offered",
        zorder=3,
    )
    left.set_ylabel("agent reports per second")
    left.set_title("KB throughput")
    left.legend(fontsize=8)
    width = 0.35
    xs = range(len(names))
    right.bar([x - width / 2 for x in xs], [results[n]["p50_ms"] or 0 for n in names], width, label="p50")
    right.bar([x + width / 2 for x in xs], [results[n]["p99_ms"] or 0 for n in names], width, label="p99")
    right.set_xticks(list(xs), names)
    right.set_ylabel("ms until durably committed")
    right.set_title("Report latency")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def chart_raft(doc: dict[str, Any], path: Path) -> bool:
    sizes = doc.get("commit_latency_ms") or {}
    if not sizes:
        return False
    plt = _pyplot()
    counts = sorted(sizes, key=int)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("p50_ms", "p50"), ("p95_ms", "p95"), ("max_ms", "max")):
        ax.plot([int(n) for n in counts], [sizes[n][key] for n in counts], marker="o", label=label)
    ax.set_xticks([int(n) for n in counts])
    ax.set_xlabel("controller replicas")
    ax.set_ylabel("ms per committed entry")
    ax.set_title("Raft commit latency (sequential commits)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- markdown ------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"  # 10582, not 1.058e+04
        return str(v)

    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(cell(v) for v in row) + " |" for row in rows],
        "",
    ]


def _missing(name: str, failed: dict[str, str]) -> list[str]:
    args = " ".join(QUICK[name][0])
    why = f" (the last run {failed[name]})" if name in failed else ""
    return [
        f"**{NOT_MEASURED}**{why}. Measure with `python benchmarks/{name}.py {args} "
        f"> benchmarks/results/{QUICK[name][1]}`, or `python benchmarks/report.py --run {name}`.",
        "",
    ]


def _image(img: Path, out: Path, name: str, alt: str, draw: Callable[[Path], bool]) -> list[str]:
    path = img / name
    if draw(path):
        return [f"![{alt}]({os.path.relpath(path, out.parent)})", ""]
    path.unlink(missing_ok=True)  # never leave a chart of older data behind
    return []


def section_failover(doc: dict[str, Any] | None, img: Path, out: Path, failed: dict[str, str]) -> list[str]:
    lines = ["## Failover (controller, real processes)", ""]
    if doc is None or not any((doc.get(k) or {}).get("n") for _label, k in FAILOVER_STEPS):
        (img / "failover-timeline.png").unlink(missing_ok=True)
        return lines + _missing("failover", failed)
    lines += _image(img, out, "failover-timeline.png", "failover timeline", lambda p: chart_failover(doc, p))
    rows = [
        [label.strip(), s.get("n"), s.get("p50"), s.get("p95"), s.get("max")]
        for label, key in FAILOVER_STEPS
        if (s := doc.get(key) or {}).get("n")
    ]
    lines += table(["step (seconds from the failure or the kill)", "trials", "p50 s", "p95 s", "max s"], rows)
    lines += [
        f"The benchmark records the decision (`controller.decision` in the KB) and the moment every "
        f"service is healthy elsewhere; detection by the agent's missed heartbeats and the playbook's "
        f"start are inside the first and second span and are **{NOT_MEASURED}** separately.",
        "",
    ]
    checks = [
        [
            "duplicate migrations",
            doc.get("duplicate_migrations"),
            (doc.get("targets") or {}).get("duplicate_migrations"),
        ],
        ["lost decisions", doc.get("lost_decisions"), (doc.get("targets") or {}).get("lost_decisions")],
    ]
    for key in ("stale_writes", "non_leader_migrations", "false_failovers", "orphans"):  # fault trials
        if key in doc:
            checks.append([key.replace("_", " "), doc[key], (doc.get("targets") or {}).get(key)])
    if (doc.get("recover_seconds") or {}).get("p99") is not None:
        checks.append(
            [
                "recover seconds p99",
                doc["recover_seconds"]["p99"],
                f"<= {(doc.get('targets') or {}).get('recover_seconds_p99_max', 15)}",
            ]
        )
    lines += table(["safety check", "measured", "target"], checks)
    if doc.get("fault_trials"):
        lines += table(
            ["fault trial", "recover s", "orphans left", "playbook runs", "decisions"],
            [
                [
                    t.get("fault"),
                    t.get("recover", "-"),
                    t.get("orphans"),
                    t.get("playbook_runs", "-"),
                    t.get("decisions", "-"),
                ]
                for t in doc["fault_trials"]
            ],
        )
    if doc.get("settings"):
        lines += ["Settings: " + ", ".join(f"{k} {v}" for k, v in doc["settings"].items()) + ".", ""]
    return lines


def section_placement(
    rows: list[dict[str, Any]] | None, img: Path, out: Path, failed: dict[str, str]
) -> list[str]:
    lines = ["## Placement time against fleet size", ""]
    if not rows:
        (img / "placement-time.png").unlink(missing_ok=True)
        return lines + _missing("placement", failed)
    lines += _image(
        img, out, "placement-time.png", "placement time per scorer", lambda p: chart_placement(rows, p)
    )
    ordered = sorted(rows, key=lambda r: (r["clusters"], r["services"], r["scorer"]))
    lines += table(
        [
            "clusters",
            "services",
            "scorer",
            "seconds",
            "CPU s",
            "objective",
            "optimal objective",
            "capacity violations",
        ],
        [
            [
                r["clusters"],
                r["services"],
                r["scorer"],
                r["seconds"],
                r.get("cpu_seconds"),
                r.get("objective"),
                r.get("optimal_objective"),
                r.get("capacity_violations"),
            ]
            for r in ordered
        ],
    )
    scorers = {r["scorer"] for r in rows}
    gaps = [
        f"{scorer} at {c}x{n}"
        for c, n in sorted({(r["clusters"], r["services"]) for r in rows})
        for scorer in sorted(
            scorers - {r["scorer"] for r in rows if (r["clusters"], r["services"]) == (c, n)}
        )
    ]
    if gaps:
        lines += [
            f"{', '.join(gaps)}: **{NOT_MEASURED}** (the benchmark leaves a scorer out when its MILP is "
            "too large or HiGHS proves no plan within 60 s).",
            "",
        ]
    return lines


def _ratio(a: Any, b: Any) -> float | None:
    return round(a / b, 2) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _median(values: list[Any]) -> Any:
    nums = sorted(v for v in values if isinstance(v, (int, float)))
    return nums[len(nums) // 2] if nums else None


def _kb_row(backend: str, r: dict[str, Any], targets: dict[str, Any], met: Any) -> list[Any]:
    """One backend of one kb.py output: medians over its runs, the worst p99, and the ratios
    to the targets (achieved/offered rate, worst p99/target p99)."""
    runs = r.get("runs") or [r]
    p99_target = targets.get(f"{backend}_p99_ms_max")
    loadgen = _median([x.get("loadgen_cpu_ms_per_request") for x in runs])
    return [
        backend,
        r.get("instances", 1),
        r.get("agents"),
        r.get("target_rate"),
        len(runs),
        _median([x.get("rate") for x in runs]),
        r.get("rate"),
        _ratio(r.get("rate"), r.get("target_rate")),
        r.get("errors"),
        _median([x.get("p50_ms") for x in runs]),
        _median([x.get("p99_ms") for x in runs]),
        r.get("p99_ms"),
        ", ".join(str(x.get("p99_ms")) for x in runs),
        p99_target,
        _ratio(r.get("p99_ms"), p99_target),
        r.get("server_cpu_ms_per_request"),
        r.get("database_cpu_ms_per_request", "-")
        if r.get("database_cpu_ms_per_request") is not None
        else "-",
        loadgen,
        ", ".join(f"{x['loadavg'][0]}->{x['loadavg'][1]}" for x in runs if x.get("loadavg")) or "-",
        ", ".join(_steal(x["steal_pct_by_second"]) for x in runs if x.get("steal_pct_by_second")) or "-",
        met,
    ]


def _steal(by_second: list[float]) -> str:
    """A run's steal time: its mean % and its worst second's."""
    return f"{sum(by_second) / len(by_second):.1f} ({max(by_second):g})"


KB_HEADER = [
    "backend",
    "KB instances",
    "agents",
    "offered /s",
    "runs",
    "achieved /s median",
    "achieved /s lowest",
    "lowest/offered",
    "errors",
    "p50 ms median",
    "p99 ms median",
    "p99 ms worst",
    "p99 ms per run",
    "p99 target ms",
    "worst p99/target",
    "KB CPU ms/report",
    "PostgreSQL CPU ms/report",
    "load generator CPU ms/report",
    "load avg (1 min) per run",
    "steal % per run (worst second)",
    "target met (every run)",
]


def kb_measurement(label: str, doc: dict[str, Any]) -> list[str]:
    """One kb.py output: the command, the machine and its load, a row per backend, the JSON
    targets and verdicts as printed."""
    machine = doc.get("machine") or {}
    targets = doc.get("targets") or {}
    met = doc.get("target_met") or {}
    lines = [f"### {label}", ""]
    if doc.get("command"):
        lines += [f"`{doc['command']}`", ""]
    lines += table(
        KB_HEADER, [_kb_row(n, r, targets, met.get(n)) for n, r in (doc.get("results") or {}).items()]
    )
    lines += [
        f"Machine: {machine.get('cpus')} CPUs, Python {machine.get('python')}, load average "
        f"before {machine.get('loadavg_before')}, after {machine.get('loadavg_after')} (other work on "
        "the machine competes with the KB, the database and the load generator). Targets and verdicts "
        "as `benchmarks/kb.py` printed them:",
        "",
        "```json",
        json.dumps({"targets": targets, "target_met": met}, indent=None),
        "```",
        "",
    ]
    return lines


def section_kb(
    docs: list[tuple[str, dict[str, Any]]] | None, img: Path, out: Path, failed: dict[str, str]
) -> list[str]:
    """Every saved kb.py output (file name order), the last one charted."""
    lines = ["## Knowledge Base throughput (agent reports)", ""]
    docs = [(name, d) for name, d in (docs or []) if d.get("results")]
    if not docs:
        (img / "kb-throughput.png").unlink(missing_ok=True)
        return lines + _missing("kb", failed)
    last = docs[-1][1]
    lines += _image(img, out, "kb-throughput.png", "KB throughput and latency", lambda p: chart_kb(last, p))
    lines += [
        "Agent reports (heartbeat, one node, one latency) from `benchmarks/kb.py`: open-loop agents on "
        "keep-alive connections, round-robin over the KB instances; a report's latency ends when its "
        "answer is read, which the KB sends only after the report is committed. Per backend the "
        "median over the runs, the lowest rate and the worst p99 (a target is met only if every run "
        "meets it), and the CPU the KB processes and the load generator used per report.",
        "",
    ]
    for name, doc in docs:
        lines += kb_measurement(name, doc)
    return lines


def section_raft(doc: dict[str, Any] | None, img: Path, out: Path, failed: dict[str, str]) -> list[str]:
    lines = ["## Raft commit latency against replica count", ""]
    sizes = (doc or {}).get("commit_latency_ms") or {}
    if not sizes:
        (img / "raft-commit-latency.png").unlink(missing_ok=True)
        return lines + _missing("failover", failed)
    lines += _image(img, out, "raft-commit-latency.png", "Raft commit latency", lambda p: chart_raft(doc, p))
    lines += table(
        ["replicas", "commits", "p50 ms", "p95 ms", "max ms"],
        [
            [s["replicas"], s["commits"], s["p50_ms"], s["p95_ms"], s["max_ms"]]
            for _replicas, s in sorted(sizes.items(), key=lambda kv: int(kv[0]))
        ],
    )
    return lines


def section_plain(title: str, name: str, doc: dict[str, Any] | None, failed: dict[str, str]) -> list[str]:
    lines = [f"## {title}", ""]
    if not doc:
        return lines + _missing(name, failed)
    flat = [
        [k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in doc.items() if k != "benchmark"
    ]
    return lines + table(["measure", "value"], flat)


def render(found: dict[str, Any], img: Path, out: Path, failed: dict[str, str], source: str) -> str:
    img.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `python benchmarks/report.py` from {source} on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every number below is a measurement from "
        f"those files; a benchmark without output says **{NOT_MEASURED}**. The machines these ran on are "
        "shared and small (see each section's machine notes), so absolute times are upper bounds.",
        "",
        "Measured here: " + (", ".join(sorted(found)) or "nothing yet") + ".",
        "",
    ]
    lines += section_failover(found.get("failover"), img, out, failed)
    lines += section_placement(found.get("placement"), img, out, failed)
    lines += section_kb(found.get("kb"), img, out, failed)
    lines += section_raft(found.get("failover"), img, out, failed)
    lines += section_plain("Deploy (Bookinfo on the paper testbed)", "deploy", found.get("deploy"), failed)
    lines += section_plain("Testbed scale", "testbed", found.get("testbed"), failed)
    return "\n".join(lines).rstrip() + "\n"


def splice(text: str, section: list[str]) -> str:
    """``text`` with its section titled like ``section``'s first line (up to the next ``## ``
    heading) replaced by ``section``, or with ``section`` appended; the rest is kept as it is."""
    lines = text.splitlines()
    title = section[0]
    body = [*section]
    while body and not body[-1].strip():
        body.pop()
    if title not in lines:
        return "\n".join([*lines, "", *body]).rstrip() + "\n"
    start = lines.index(title)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join([*lines[:start], *body, "", *lines[end:]]).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from",
        dest="source",
        default=str(ROOT / "benchmarks" / "results"),
        help="folder of saved outputs (default: benchmarks/results)",
    )
    parser.add_argument(
        "--run",
        nargs="?",
        const=",".join(QUICK),
        metavar="NAME[,NAME...]",
        help=f"first run these quick variants (default all: {', '.join(QUICK)}) into --from",
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--img", default=str(ROOT / "docs" / "img"), help="folder for the charts")
    parser.add_argument(
        "--section",
        choices=["kb"],
        help="rewrite only this benchmark's section of --out, keeping the rest of the file",
    )
    args = parser.parse_args(argv)
    results, out, img = Path(args.source), Path(args.out), Path(args.img)
    failed: dict[str, str] = {}
    if args.run:
        names = [n.strip() for n in args.run.split(",") if n.strip()]
        unknown = [n for n in names if n not in QUICK]
        if unknown:
            parser.error(
                f"--run: unknown benchmark {', '.join(unknown)}; expected some of {', '.join(QUICK)}"
            )
        failed = run_quick(names, results)
    if not results.is_dir():
        parser.error(f"--from: {results} is not a folder (run with --run to create it)")
    found = load(results)
    try:
        source = str(results.resolve().relative_to(ROOT))
    except ValueError:
        source = str(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.section == "kb":
        img.mkdir(parents=True, exist_ok=True)
        old = out.read_text(encoding="utf-8") if out.exists() else "# Benchmarks\n"
        out.write_text(splice(old, section_kb(found.get("kb"), img, out, failed)), encoding="utf-8")
    else:
        out.write_text(render(found, img, out, failed, f"`{source}`"), encoding="utf-8")
    print(f"report: wrote {out} ({', '.join(sorted(found)) or 'nothing measured'})", file=sys.stderr)
    for name, why in failed.items():
        print(f"report: {name} not measured: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
