"""``qonnect survivability``: would every application outlive any one cluster's failure?

Evaluates every single-cluster failure, and every failure of one value of the labels named
(--label site, region, tier) or stated in an application's ``spec.survive``, with the planner,
stored policies and capacities the controller's heal uses (placement/whatif.py), and judges each
application against the failures it states it must survive (by default: any one cluster's).
Exit code 0 when the fleet is survivable, 1 when it is not, 2 for a usage error, so a CI
pipeline or an AWX job template can gate on it.

The fleet is read from the Knowledge Base (--kb or $QONNECT_KB_URL: every application with the
policy of its last deploy) or from an inventory file with the applications of --spec files.
``qonnect plan --fail`` reads it the same way (:func:`read_fleet`) and shows one scenario
(:func:`render_scenario`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement import SCORERS, InventoryError
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import (
    UnknownClusterError,
    check_cluster_names,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.whatif import (
    Report,
    Scenario,
    Tenant,
    WhatIf,
    amount,
    survivability,
    tenants_from_kb,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError, load_application_file
from ansible_collections.qonnect.core.plugins.module_utils.runners.placement import (
    NotPlacedError,
    given_tenant,
    whatif_fleet,
)

from qonnect.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "survivability",
        help="N-1 report: does every application outlive any one cluster's failure?",
        description=__doc__.splitlines()[0],
        epilog="Exit code: 0 survivable, 1 not survivable, 2 usage error.",
    )
    add_fleet_arguments(p)
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY",
        help="also fail every value of this cluster label, one at a time, e.g. site, region or tier "
        "(repeatable; labels stated in an application's spec.survive are always evaluated)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def add_fleet_arguments(p: argparse.ArgumentParser, spec_help: str = "") -> None:
    """Where the fleet comes from, and the policy of the applications of --spec files (the
    options `qonnect plan` has too: one definition for both)."""
    p.add_argument(
        "--spec",
        action="append",
        default=[],
        metavar="FILE",
        help=spec_help
        or "QoS spec of an application to include (repeatable); with --inventory the "
        "applications are these; with --kb it joins the stored ones (replacing one of its name)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--inventory", help="inventory file (JSON or YAML, the KB's format)")
    src.add_argument("--kb", help="Knowledge Base URL (default: $QONNECT_KB_URL)")
    p.add_argument(
        "--token-file", help="file holding the KB bearer token (default: the token in $QONNECT_KB_TOKEN)"
    )
    p.add_argument("--ca", help="CA bundle to verify the KB's certificate")
    p.add_argument("--scorer", choices=SCORERS, default="weighted", help="the --spec applications' scorer")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="CLUSTER",
        help="do not place the --spec applications on this cluster (repeatable)",
    )
    p.add_argument(
        "--hysteresis",
        type=float,
        default=0.1,
        help="keep the --spec applications' current cluster unless another is better by this fraction",
    )
    p.set_defaults(bundle=[])


def read_fleet(args: argparse.Namespace) -> tuple[WhatIf, list[str], dict[str, str]]:
    """(the what-if fleet, notes for the reader, applications that could not be read -> why).

    From the KB: every stored application with its stored policy, the --spec files' on top. From
    an inventory file: the --spec files' applications, where the inventory's ``placements`` says
    they run (one it does not place is placed first, as a deploy would place it now).
    """
    specs = list(args.spec or [])
    if args.inventory:
        from qonnect.plan import read_inventory_file

        inventory: Any = read_inventory_file(args.inventory)
        stored: list[Tenant] = []
        problems: dict[str, str] = {}
        if not specs:
            raise UserError(
                "--inventory FILE needs the applications: one --spec FILE each "
                "(with --kb, the KB's applications are used)"
            )
    else:
        inventory, stored, problems = _from_kb(args)
    if not isinstance(inventory, dict):
        raise UserError("the inventory is not a mapping with clusters (the KB's /api/v1/inventory format)")
    try:
        check_cluster_names(inventory, exclude=args.exclude)
    except UnknownClusterError as exc:
        raise UserError(str(exc)) from None
    given = [given_tenant(app, vars(args)) for app in _load_specs(args, specs, inventory)]
    try:
        whatif, notes = whatif_fleet(inventory, stored, given)
    except NotPlacedError as exc:
        raise UserError("\n  ".join([f"{exc.summary}:", *exc.errors])) from None
    except (InventoryError, ValueError, ImportError) as exc:
        raise UserError(str(exc)) from None
    return whatif, notes, problems


def _from_kb(args: argparse.Namespace) -> tuple[dict, list, dict[str, str]]:
    url = args.kb or os.environ.get("QONNECT_KB_URL", "").strip()
    if not url:
        raise UserError("expected --inventory FILE (with --spec files) or --kb URL (or set QONNECT_KB_URL)")
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

    from qonnect.status import kb_token

    token = kb_token(args)
    try:
        return tenants_from_kb(KBClient(url, token, ca_path=args.ca))
    except KBError as exc:
        raise UserError(f"cannot read the fleet from the KB at {url}: {exc}") from None


def _load_specs(args: argparse.Namespace, specs: list[str], inventory: dict) -> list:
    """Every --spec file's application; every invalid one reported at once."""
    from qonnect.plan import bundles

    given = bundles(args.bundle)
    if given and len(specs) > 1:
        raise UserError("--bundle goes with one --spec file (QONNECT's format), not with several")
    found = inventory.get("clusters")
    clusters: list = found if isinstance(found, list) else []
    apps: list = []
    errors: list[str] = []
    seen: dict[str, str] = {}
    for path in specs:
        try:
            app = load_application_file(path, bundles=given, clusters=lambda: clusters)
        except QosSpecError as exc:
            errors.append(f"{path} is not a valid QoS spec:\n    " + "\n    ".join(exc.errors))
            continue
        if app.name in seen:
            errors.append(f"{path}: application {app.name!r} is also the one of {seen[app.name]}")
            continue
        seen[app.name] = path
        apps.append(app)
    if errors:
        raise UserError("\n  ".join(errors))
    return apps


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    whatif, notes, problems = read_fleet(args)
    try:
        report = survivability(whatif, labels=sorted(set(args.label)))
    except (InventoryError, ValueError) as exc:
        raise UserError(str(exc)) from None
    unknown = [key for key in sorted(set(args.label)) if not whatif.label_values(key)]
    notes += [f"--label {key}: no cluster has this label, so it adds no scenario" for key in unknown]
    if args.json:
        doc = report.to_dict()
        if problems:
            doc["not_evaluated"] = problems
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        emit(json.dumps(doc, indent=2, sort_keys=True))
    else:
        emit(render_report(report, whatif, notes, problems, time.monotonic() - began))
    return 0 if report.survivable and not problems else 1


def emit(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # e.g. piped into head: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# -- text ---------------------------------------------------------------------------------------


def render_report(
    report: Report, whatif: WhatIf, notes: list[str], problems: dict[str, str], seconds: float
) -> str:
    """The report as tables: the scenarios that touch an application, spare capacity per tier,
    and each application against its own statement."""
    apps, clusters = len(whatif.tenants), len(whatif.cluster_names)
    verdict = "survivable" if report.survivable and not problems else "NOT survivable"
    lines = [
        f"N-1 survivability of {_n(apps, 'application')} on {_n(clusters, 'cluster')}: {verdict}",
        f"({_n(len(report.scenarios), 'scenario')}, {report.evaluated} planned, in {seconds:.2f} s)",
    ]
    lines += [f"note: {n}" for n in notes]
    shown = [s for s in report.scenarios if s.outcomes]
    quiet = [s.name for s in report.scenarios if not s.outcomes]
    lines.append("")
    if shown:
        rows: list[tuple[str, ...]] = []
        for s in shown:
            first = s.first_shortfall()
            why = first.text() if first is not None else _first_reason(s)
            rows.append((s.name, ", ".join(s.outcomes), "yes" if s.survivable else "NO", why))
        lines += _table(("scenario", "affected", "survivable", "first shortfall"), rows)
        counted = {v["scenario"] for a in report.applications.values() for v in a["violations"]}
        if any(not s.survivable and s.name not in counted for s in shown):
            lines.append(
                "(a NO counts only against the applications that state that failure in spec.survive;"
                " by default any one cluster's)"
            )
    else:
        lines.append("No scenario affects an application (none has a replica on a cluster).")
    if quiet:
        lines.append(f"No application on: {', '.join(quiet)}.")
    lines += ["", "Spare capacity per tier (clusters up):"]
    lines += _table(("tier", "now", "least after a heal", "in scenario"), _spare_rows(report, whatif), "  ")
    lines += ["", "Applications against what they must survive:"]
    verdicts: list[tuple[str, ...]] = []
    for name, verdict_of in report.applications.items():
        stated = ", ".join(_statement(s) for s in verdict_of["must_survive"]) or "nothing"
        violations = verdict_of["violations"]
        if not violations:
            verdicts.append((name, stated, "survives"))
        for i, v in enumerate(violations):
            verdicts.append(
                (
                    name if i == 0 else "",
                    stated if i == 0 else "",
                    f"does NOT survive {v['scenario']}: {v['reason']}",
                )
            )
    for name, why in sorted(problems.items()):
        verdicts.append((name, "?", f"not evaluated: {why}"))
    lines += _table(("application", "must survive", "verdict"), verdicts, "  ")
    return "\n".join(lines)


def render_scenario(scenario: Scenario, whatif: WhatIf, notes: list[str], problems: dict[str, str]) -> str:
    """One what-if failure as `qonnect plan --fail` shows it: per application and service from ->
    to, the objective before and after, and what cannot be re-placed with its shortfall."""
    failed = ", ".join(scenario.failed)
    label = f" ({scenario.name})" if scenario.name != f"cluster {failed}" else ""
    lines = [f"What if {failed} failed now{label}: the heal the controller would plan"]
    lines += [f"note: {n}" for n in notes]
    lines += [f"not simulated: {name}: {why}" for name, why in sorted(problems.items())]
    if not scenario.outcomes:
        lines += ["", f"No application has a replica on {failed}: nothing to re-place."]
    for name, o in scenario.outcomes.items():
        before, after = _objective(o.objective_before), _objective(o.objective_after)
        state = "re-placed" if o.placed else "CANNOT be re-placed"
        lines += ["", f"{name}: {state}, objective {before} -> {after}"]
        width = max((len(s) for s in o.moves), default=0)
        for svc, move in o.moves.items():
            was = ", ".join(move["from"]) or "(not running)"
            if not o.placed:
                where = f"{was} -> (not planned)"
            elif move["from"] == move["to"]:
                where = f"{was} (unchanged)"
            else:
                where = f"{was} -> {', '.join(move['to'])}"
            lines.append(f"  {svc:<{width}}  {where}")
        if not o.placed:
            lines.append(f"  why: {o.reason}")
            if o.shortfall is not None and o.shortfall.resource is not None:
                lines.append(f"  missing: {o.shortfall.text()}")
        if o.explanation:
            from qonnect.plan import explanation_lines

            lines += [
                f"  {line}" if line else line
                for line in explanation_lines(o.to_dict() | {"services": o.services}, width)
            ]
    lines += ["", "Spare capacity after the heal (clusters still up):"]
    rows = [
        (tier, amount("cpu", free.get("cpu", 0.0)), amount("memory", free.get("memory", 0.0)))
        for tier, free in scenario.spare.items()
    ]
    lines += _table(("tier", "cpu", "memory"), rows, "  ")
    lines.append("")
    if scenario.survivable:
        lines.append(
            f"Survivable: every application on {failed} is re-placed."
            if scenario.outcomes
            else "Survivable: nothing runs there."
        )
    else:
        stuck = [n for n, o in scenario.outcomes.items() if not o.placed]
        lines.append(f"NOT survivable: {', '.join(stuck)} cannot be re-placed.")
    return "\n".join(lines)


def _spare_rows(report: Report, whatif: WhatIf) -> list[tuple[str, str, str, str]]:
    now = whatif._spare(whatif.start, [])
    rows = []
    for tier, free in now.items():
        least: tuple[float, float, str] | None = None
        for s in report.scenarios:
            if s.label is not None or tier not in s.spare:
                continue  # the single-cluster failures: what N-1 leaves
            cpu, mem = s.spare[tier].get("cpu", 0.0), s.spare[tier].get("memory", 0.0)
            if least is None or (cpu, mem) < least[:2]:
                least = (cpu, mem, s.name)
        rows.append(
            (
                tier,
                f"{amount('cpu', free.get('cpu', 0.0))}, {amount('memory', free.get('memory', 0.0))}",
                f"{amount('cpu', least[0])}, {amount('memory', least[1])}" if least else "-",
                least[2] if least else "-",
            )
        )
    return rows


def _first_reason(s: Scenario) -> str:
    return next((o.reason for o in s.outcomes.values() if not o.placed), "-")


def _statement(s: dict) -> str:
    if s.get("cluster") == "any":
        return "any one cluster"
    return f"each {s['label']}" if "label" in s else json.dumps(s)


def _objective(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]], indent: str = "") -> list[str]:
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
    out = []
    for r in (head, *rows):
        cells = [f"{c!s:<{w}}" for c, w in zip(r, widths, strict=True)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out
