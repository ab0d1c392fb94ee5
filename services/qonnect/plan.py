"""``qonnect plan``: show where an application would be placed, and why, without deploying.

Reads the inventory from a JSON/YAML file or from the Knowledge Base (bearer token read from a
file or $QONNECT_KB_TOKEN, so it never appears in the process list or shell history; the URL
from --kb or $QONNECT_KB_URL, as `qonnect status` reads them).

With --fail CLUSTER and/or --fail-label KEY=VALUE it shows instead the plan the controller's
heal would commit if those clusters failed now, for every application on them (from the KB:
each stored application with its stored policy; from --inventory: the --spec files'
applications), with the planner the controller uses (qonnect/survivability.py reads the fleet).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    InventoryError,
    PlacementError,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.references import (
    UnknownClusterError,
    check_cluster_names,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    CRITERIA,
    QosSpecError,
    load_application_file,
)
from ansible_collections.qonnect.core.plugins.module_utils.runners.placement import (
    FailureChoiceError,
    failed_clusters,
)

from qonnect.cli import UserError
from qonnect.status import kb_token
from qonnect.survivability import add_fleet_arguments


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="compute a placement plan and explain it", description=__doc__.splitlines()[0]
    )
    add_fleet_arguments(
        p,
        "QoS spec (qonnect.io/v1 or QONNECT format); with --fail repeatable (the applications "
        "of an --inventory file), and optional with --kb (the KB's applications are used)",
    )
    p.add_argument(
        "--bundle",
        action="append",
        default=[],
        metavar="TIER_KEY=FILE",
        help="QONNECT's tier manifest bundle beside its Application file, e.g. "
        "cloud_svc=productpage.yaml (repeatable; as QONNECT's API takes them)",
    )
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="CLUSTER[,CLUSTER...]",
        help="what if these clusters failed now: the heal the controller would plan (repeatable)",
    )
    p.add_argument(
        "--fail-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="what if every cluster with this label failed now, e.g. site=west or tier=edge "
        "(repeatable: the union of the clusters matched)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def bundles(values: list[str]) -> dict[str, str]:
    """--bundle KEY=FILE options as a mapping (files made absolute against the working dir)."""
    out: dict[str, str] = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep or not key or not path:
            raise UserError(f"--bundle {value!r}: expected TIER_KEY=FILE, e.g. cloud_svc=productpage.yaml")
        if key in out:
            raise UserError(f"--bundle {key}: given twice")
        out[key] = os.path.abspath(path)
    return out


def run(args: argparse.Namespace) -> int:
    if args.fail or args.fail_label:
        return run_failures(args)
    if not args.spec:
        raise UserError("expected --spec FILE (the application to plan), or --fail CLUSTER")
    if len(args.spec) > 1:
        raise UserError(
            f"--spec given {len(args.spec)} times: plan places one application (several go with --fail)"
        )
    spec = args.spec[0]
    read: list[dict] = []  # the inventory, read once: by the first chart to render, else below

    def clusters() -> list:
        """Helm charts are rendered for the inventory's clusters (their kube_version and
        api_versions; none given: helm's defaults)."""
        read.append(_inventory(args))
        found = read[0].get("clusters") if isinstance(read[0], dict) else None
        return found if isinstance(found, list) else []

    try:
        app = load_application_file(spec, bundles=bundles(args.bundle), clusters=clusters)
    except QosSpecError as exc:
        raise UserError(f"{spec} is not a valid QoS spec:\n  " + "\n  ".join(exc.errors))
    inventory = read[0] if read else _inventory(args)
    try:
        check_cluster_names(inventory, exclude=args.exclude)
        plan = place(app, inventory, scorer=args.scorer, exclude=args.exclude, hysteresis=args.hysteresis)
    except (InventoryError, PlacementError, UnknownClusterError, ValueError, ImportError) as exc:
        raise UserError(str(exc)) from None
    text = json.dumps(plan.to_dict(), indent=2, sort_keys=True) if args.json else render(plan.to_dict())
    try:
        print(text, flush=True)
    except BrokenPipeError:  # e.g. piped into head: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def run_failures(args: argparse.Namespace) -> int:
    """``plan --fail``: the heal the controller would plan if those clusters failed now."""
    from qonnect.survivability import emit, read_fleet, render_scenario

    labels, malformed = fail_labels(args.fail_label)
    whatif, notes, problems = read_fleet(args)
    try:
        failed, name = failed_clusters(whatif, failures(args.fail), labels, OPTIONS)
    except FailureChoiceError as exc:
        # each message names the value: an index into the flattened options would only confuse
        errors = [re.sub(r"^(--fail(?:-label)?)\[\d+\]", r"\1", e) for e in exc.errors]
        hint = f"\n  ({exc.hint})" if exc.hint else ""
        raise UserError(
            "cannot simulate these failures:\n  " + "\n  ".join(errors + malformed) + hint
        ) from None
    except ValueError as exc:  # nothing to fail
        if not malformed:
            raise UserError(str(exc)) from None
        failed, name = [], ""
    if malformed:
        raise UserError("cannot simulate these failures:\n  " + "\n  ".join(malformed))
    try:
        scenario = whatif.fail(failed, name=name, explain=True)
    except (InventoryError, ValueError) as exc:
        raise UserError(str(exc)) from None
    if args.json:
        doc = scenario.to_dict()
        if problems:
            doc["not_simulated"] = problems
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        emit(json.dumps(doc, indent=2, sort_keys=True))
    else:
        emit(render_scenario(scenario, whatif, notes, problems))
    return 0


# how the messages of failed_clusters name the two options
OPTIONS = ("--fail", "--fail-label")


def failures(values: list[str]) -> list[str]:
    """--fail values (each CLUSTER[,CLUSTER...]) as one list of names, in the order given."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def fail_labels(values: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """--fail-label KEY=VALUE options as (key, value) pairs, and a problem for each malformed one
    (reported with every other problem of the failures asked for)."""
    out, bad = [], []
    for value in values:
        key, sep, wanted = value.partition("=")
        if not sep or not key.strip() or not wanted.strip():
            bad.append(f"--fail-label: {value!r} is not KEY=VALUE, e.g. site=west or tier=edge")
            continue
        out.append((key.strip(), wanted.strip()))
    return out, bad


def read_inventory_file(path: str) -> dict:
    """An inventory file (JSON, else YAML); UserError naming the file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the inventory {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        json_error = f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
    try:
        import yaml
    except ImportError:
        raise UserError(json_error) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise UserError(f"{path}{where}: neither JSON nor YAML: {getattr(exc, 'problem', exc)}") from None


def _inventory(args: argparse.Namespace) -> dict:
    if args.inventory:
        return read_inventory_file(args.inventory)
    url = args.kb or os.environ.get("QONNECT_KB_URL", "").strip()
    if not url:
        raise UserError("expected --inventory FILE or --kb URL (or set QONNECT_KB_URL)")
    token = kb_token(args)
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

    try:
        return KBClient(url, token, ca_path=args.ca).inventory()
    except KBError as exc:
        raise UserError(f"cannot read the inventory from the KB at {url}: {exc}") from None


def render(plan: dict) -> str:
    """The plan as text: placements first, then each service's candidates and criteria."""
    lines = [
        f"Plan for {plan['application']} (scorer {plan['scorer']}, objective {plan['objective']:.4f})",
        "",
    ]
    width = max((len(s) for s in plan["services"]), default=0)
    for svc, entries in plan["services"].items():
        where = ", ".join(
            f"{e['cluster']} x{e['replicas']} ({', '.join(sorted(set(e['nodes'])))})" for e in entries
        )
        lines.append(f"  {svc:<{width}}  -> {where}")
    return "\n".join(lines + explanation_lines(plan, width))


def explanation_lines(plan: dict, width: int = 0) -> list[str]:
    """Each service's latency bounds and every cluster considered, with its criteria or why it
    was rejected (``plan``: a plan's dict, or a what-if outcome's with its services)."""
    lines: list[str] = []
    for svc, rows in (plan.get("bounds") or {}).items():
        for r in rows:
            held = f", held to {r['limit']:g} ms where it runs now" if r["limit"] > r["bound"] else ""
            lines.append(
                f"  {svc:<{width}}     {r['cluster']} is {r['ms']:g} ms from {r['from']}: "
                f"{r['ms'] / r['bound']:.0%} of maxLatency {r['bound']:g} ms{held}"
            )
    for svc, rows in (plan.get("explanation") or {}).items():
        chosen = {e["cluster"] for e in (plan.get("services") or {}).get(svc, [])}
        names = [c for c in (*CRITERIA, "pricing", "capacity") if any(c in r["criteria"] for r in rows)]
        lines += ["", f"{svc}:", "    cluster          total  " + "".join(f"{n + ' (w)':>20}" for n in names)]
        for r in rows:
            mark = "*" if r["cluster"] in chosen else " "
            total = "-" if r["total"] is None else f"{r['total']:.3f}"
            crit = "".join(f"{_crit(r['criteria'].get(n)):>20}" for n in names) if r["criteria"] else ""
            text = f"  {mark} {r['cluster']:<15} {total:>6}  {crit}"
            if not r["eligible"]:
                text = f"  {mark} {r['cluster']:<15} {'-':>6}  rejected: {r['reason']}"
            lines.append(text.rstrip())
    return lines


def _crit(entry: dict | None) -> str:
    if not entry:
        return "-"
    return f"{entry['score']:.3g} ({entry['weight']:.2g})"
