"""The docs table from run.py's result files: trial | Karmada default | Karmada tuned | qonnect.core.

qonnect.core runs unchanged in both phases, so its column pools the two runs (its cost is given
per run). Every cell is p50 / max over the repetitions with n, or what happened, from the JSON.

    python benchmarks/peers/karmada/table.py default.json tuned.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def stat(values: list[float]) -> str:
    """'p50 / max (n = N)', or '-' when nothing was measured."""
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} / {max(values):.1f} (n = {len(values)})"


def failovers(fails: list[dict], system: str, bound: float) -> str:
    mine = [t for t in fails if t["there"].get(system)]
    healed = [t["healed_seconds"][system] for t in mine if t["healed_seconds"].get(system) is not None]
    missed = len(mine) - len(healed)
    text = stat(healed)
    if missed:
        text = f"{text}; **none within {bound:g} s in {missed} of {len(mine)}**"
    return text


def back(fails: list[dict], system: str) -> str:
    trials = [t for t in fails if t["there"].get(system)]
    if not trials:
        return "-"
    if all(t["healed_seconds"].get(system) is None for t in trials):
        return f"nothing had moved: its {len(trials)} copies there simply ran on"
    mine = [t["after_recovery"] for t in trials if t["healed_seconds"].get(system) is not None]
    left = [b["left_at_first_contact"].get(system, 0) for b in mine]
    purged = [b["no_duplicates_after_seconds"].get(system) for b in mine]
    done = [p for p in purged if p is not None]
    moved_back = sum(len(b["moved_back"].get(system, [])) for b in mine)
    at_end = sum(len(b["left_on_member_at_end"].get(system, [])) for b in mine)
    text = f"left there: {sum(left)} copies over {len(mine)} trials; none left after {stat(done)} s"
    if len(done) < len(mine) or at_end:
        text += f"; **{at_end} still there at the end**"
    return text + f"; moved back: {moved_back}"


def blips(blip: list[dict], system: str) -> str:
    """Moves (members at the end differ from before); copies started elsewhere and then removed
    (a hedge's standby) are said apart, with when the last was gone after the member's return."""
    moves = [len(t["moved"].get(system, [])) for t in blip]
    if not moves:
        return "-"
    text = f"{sum(moves)} moves in {len(moves)} blips ({', '.join(str(m) for m in moves)})"
    started = [t for t in blip if t.get("started_elsewhere", {}).get(system)]
    transient = [t for t in started if len(t["started_elsewhere"][system]) > len(t["moved"].get(system, []))]
    if transient:
        gone = [t["extra_gone_after_return_seconds"].get(system) for t in transient]
        done = [g for g in gone if g is not None]
        text += f"; copies started elsewhere and removed in {len(transient)}, gone {stat(done)} s after the return"
        if len(done) < len(gone):
            text += f"; **{len(gone) - len(done)} still there at the end**"
    if system == "qonnect":
        hedged = [t for t in blip if any(d["kind"] == "hedge" for d in t.get("qonnect_decided", []))]
        unstarted = [t for t in hedged if not t.get("started_elsewhere", {}).get(system)]
        if hedged:
            text += f"; hedge decided in {len(hedged)}"
        if unstarted:
            text += f", of which {len(unstarted)} not started (no eligible cluster then: it ended saying so)"
    return text


def committed(fails: list[dict]) -> str:
    """qonnect's committed move (its cluster-down decision), seconds after the failure."""
    values = [t["qonnect_move_committed_seconds"] for t in fails if t.get("qonnect_move_committed_seconds")]
    return stat(values)


def k_deploy(k_fails: list[dict], system: str) -> str:
    """The k apps' deploy time, once per repetition (each of a repetition's failures carries
    the same deploy: consecutive equal records are one)."""
    if not k_fails:
        return "not run"
    deploys = [
        t["deploy_seconds"]
        for i, t in enumerate(k_fails)
        if i == 0 or t["deploy_seconds"] != k_fails[i - 1]["deploy_seconds"]
    ]
    values = [d[system] for d in deploys]
    return f"{values[0]:.1f}" if len(values) == 1 else stat(values)


def cost(phase: dict, system: str) -> str:
    c = phase.get("cost", {}).get(system)
    if not c:
        return "- (run not finished)"
    text = f"{c['cpu_seconds']:.1f} CPU-s / {c['peak_rss_mib_sum']:.0f} MiB"
    sampled = c.get("sampled_rss", {})
    if sampled.get("peak_total_mib"):  # runs since 2026-12-03: simultaneous, with children
        text += f" (sampled at once: {sampled['peak_total_mib']:.0f} MiB"
        if sampled.get("peak_children_mib"):
            text += f", children {sampled['peak_children_mib']:.0f}"
        text += ")"
    return text + f" ({phase['seconds'] / 60:.0f} min)"


def table(runs: dict[str, dict[str, Any]]) -> str:
    bound = next(iter(runs.values())).get("settings", {}).get("bound_s", 90)  # absent while running
    # A phase may come from two runs (the default run ends with the tuned k trial): pool trials.
    t: dict[str, dict[str, list]] = {}
    costs: list[tuple[str, dict]] = []
    for r in runs.values():
        for name, phase in r["phases"].items():
            pooled = t.setdefault(name, {})
            for trial, values in phase["trials"].items():
                if isinstance(values, list) and trial in ("deploy", "fail", "blip", "k_apps"):
                    pooled.setdefault(trial, []).extend(values)
            if any(phase.get("trials", {}).get(x) for x in ("deploy", "fail", "k_apps")):
                costs.append((name, phase))  # the phases whose cost the table quotes
    d, u = t.get("default", {}), t.get("tuned", {})
    both = [*d.get("fail", []), *u.get("fail", [])]
    k_d, k_u = d.get("k_apps") or [], u.get("k_apps") or []
    rows = [
        (
            "deploy -> every Deployment Ready (s, p50 / max)",
            stat([x["karmada"] for x in d.get("deploy", [])]),
            stat([x["karmada"] for x in u.get("deploy", [])]),
            stat([x["qonnect"] for x in [*d.get("deploy", []), *u.get("deploy", [])]]),
        ),
        (
            "member API server stopped -> its Deployments Ready elsewhere (s)",
            failovers(d.get("fail", []), "karmada", bound),
            failovers(u.get("fail", []), "karmada", bound),
            failovers(both, "qonnect", bound),
        ),
        (
            "... qonnect.core: its move committed (s; Ready elsewhere above counts the standby copy)",
            "-",
            "-",
            committed([t for t in both if t["there"].get("qonnect")]),
        ),
        (
            "member comes back: copies left there",
            back(d.get("fail", []), "karmada"),
            back(u.get("fail", []), "karmada"),
            back(both, "qonnect"),
        ),
        (
            "15 s API-server blip: Deployments moved",
            blips(d.get("blip", []), "karmada"),
            blips(u.get("blip", []), "karmada"),
            blips([*d.get("blip", []), *u.get("blip", [])], "qonnect"),
        ),
        (
            "k = 10 applications, their member stopped (s)",
            failovers(k_d, "karmada", bound) if k_d else "not run",
            failovers(k_u, "karmada", bound) if k_u else "not run",
            failovers([*k_d, *k_u], "qonnect", bound),
        ),
        (
            "k = 10 applications deployed -> all Ready (s; Karmada's applied at once, qonnect's in one "
            "deploy.yml run, its list form; one by one before 2026-12-07)",
            k_deploy(k_d, "karmada"),
            k_deploy(k_u, "karmada"),
            "; ".join(
                f"{n} phase: {k_deploy(k, 'qonnect')}" for n, k in (("default", k_d), ("tuned", k_u)) if k
            )
            or "not run",
        ),
        (
            "control plane per phase: CPU-seconds / sum of per-process peak RSS",
            "; ".join(cost(p, "karmada") for n, p in costs if n == "default") or "-",
            "; ".join(cost(p, "karmada") for n, p in costs if n == "tuned") or "-",
            "; ".join(f"{n} phase: {cost(p, 'qonnect')}" for n, p in costs),
        ),
    ]
    lines = ["| trial | Karmada default | Karmada tuned | qonnect.core |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    runs = {}
    for arg in sys.argv[1:]:
        try:
            runs[arg] = json.loads(Path(arg).read_text())
        except (OSError, ValueError) as exc:
            print(f"table: cannot read {arg}: {exc}", file=sys.stderr)
            return 1
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
