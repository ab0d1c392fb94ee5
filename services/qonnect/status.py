"""``qonnect status``: the whole federation on one screen, read from the Knowledge Base.

Clusters grouped by tier with health, free capacity, energy and price; what runs on each; the
controller's leader and term; the last events. The KB does not know which replica leads (the
controller records decisions, not elections), so the leader comes from ``--controller`` status
endpoints; without them it is "unknown" and only the newest fencing term the KB saw is shown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    current_placement,
    free_capacity,
)

from qonnect.cli import UserError
from qonnect.controller import journal

TIERS = ("cloud", "fog", "edge")
API = "/api/v1"
SUMMARY_ABOVE = 100  # more clusters than this: counts and the unhealthy ones, unless --all
PAGE = 500  # clusters per inventory page when every cluster of a large federation is shown
HEALTHY, FAILED = "Healthy", "Failed"  # workload states of the agent's report
REASON_WIDTH = 200  # characters of a workload's failing reason shown on its line


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status", help="show clusters, placements, controller and events", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--kb", default=os.environ.get("QONNECT_KB_URL"), help="Knowledge Base URL (default: $QONNECT_KB_URL)"
    )
    p.add_argument(
        "--token-file",
        help="file holding a KB bearer token (a reader token is enough; "
        "default: the token in $QONNECT_KB_TOKEN)",
    )
    p.add_argument("--ca", help="CA bundle to verify the KB's certificate")
    p.add_argument(
        "--controller",
        action="append",
        default=[],
        metavar="URL[,URL...]",
        help="status endpoint of controller replicas, e.g. http://127.0.0.1:9101 "
        "(repeatable; default: $QONNECT_CONTROLLER_URL)",
    )
    p.add_argument("--events", type=int, default=10, metavar="N", help="how many recent events")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--all",
        dest="clusters",
        action="store_const",
        const="all",
        default="auto",
        help=f"list every cluster (default: only up to {SUMMARY_ABOVE} clusters; above, "
        "counts per tier and the clusters that are not healthy)",
    )
    shown.add_argument(
        "--summary",
        dest="clusters",
        action="store_const",
        const="summary",
        help="counts per tier and the clusters that are not healthy, whatever the size",
    )
    p.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until interrupted",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.kb:
        raise UserError("--kb: expected the KB URL (or set QONNECT_KB_URL)")
    if not 1 <= args.events <= 1000:
        raise UserError(f"--events: expected 1..1000, got {args.events}")
    if args.watch is not None and not args.watch > 0:
        raise UserError(f"--watch: expected a number of seconds > 0, got {args.watch:g}")
    try:
        kb = KBClient(args.kb, kb_token(args), ca_path=args.ca, timeout=args.timeout)
    except KBError as exc:
        raise UserError(f"--kb: {exc.message}") from None
    controllers = [
        u.strip()
        for item in (args.controller or [os.environ.get("QONNECT_CONTROLLER_URL", "")])
        for u in item.split(",")
        if u.strip()
    ]
    while True:
        try:
            doc = collect(kb, controllers, args.events, args.timeout, getattr(args, "clusters", "auto"))
        except KBError as exc:
            if args.watch is None:
                raise UserError(f"cannot read the KB at {kb.url}: {exc}") from None
            doc = None
            text = f"cannot read the KB at {kb.url}: {exc} (retrying every {args.watch:g} s)"
        if doc is not None:
            text = json.dumps(doc, indent=2) if args.json else render(doc)
        if args.watch is not None and not args.json and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")  # clear the screen between refreshes
        try:
            print(text, flush=True)
        except BrokenPipeError:  # e.g. piped into head: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if args.watch is None:
            return 0
        time.sleep(args.watch)


def kb_token(args: argparse.Namespace) -> str:
    """The KB token from --token-file, else $QONNECT_KB_TOKEN (also read by `qonnect plan`)."""
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UserError(f"--token-file {args.token_file}: cannot read ({exc.strerror})") from None
        if not token:
            raise UserError(f"--token-file {args.token_file}: the file is empty; expected a KB token")
        return token
    token = os.environ.get("QONNECT_KB_TOKEN", "").strip()
    if not token:
        raise UserError("--token-file: expected a file holding a KB token (or set QONNECT_KB_TOKEN)")
    return token


# -- gathering ---------------------------------------------------------------------------------


def collect(
    kb: KBClient,
    controllers: list[str],
    events: int = 10,
    timeout: float = 5.0,
    clusters_shown: str = "auto",
) -> dict[str, Any]:
    """One status document from the KB (and the controller replicas, if given).

    ``clusters_shown``: ``auto`` lists every cluster of a federation of up to SUMMARY_ABOVE
    clusters, else summarises (counts per tier and health, the clusters that are not healthy:
    the KB's ``GET /summary``); ``all`` lists every cluster (a large federation is read a page
    at a time); ``summary`` always summarises."""
    counts = None
    try:
        counts = kb.summary()
    except KBError as exc:
        if exc.status != 404:  # a KB older than the summary: read everything as before
            raise
    if counts is not None and (
        clusters_shown == "summary" or (clusters_shown == "auto" and counts["clusters"] > SUMMARY_ABOVE)
    ):
        placements = kb.request("GET", f"{API}/placements")["placements"]
        recent = kb.list_events(limit=events)
        return {
            "kb": kb.url,
            "time": time.time(),
            "summary": counts,
            "applications": sorted(p["application"] for p in placements),
            "controller": (ctl := _controller(controllers, placements, recent, timeout)),
            "survivability": survivability(kb, ctl),
            "events": recent,
        }
    if counts is not None and counts["clusters"] > SUMMARY_ABOVE:  # every one, a page at a time
        entries: list[dict[str, Any]] = []
        after = None
        while True:
            page = kb.inventory_page(limit=PAGE, after=after)
            entries += page["clusters"]
            after = page.get("next")
            if not after:
                break
        inventory: dict[str, Any] = {"clusters": entries}
        clusters = [
            {
                "name": e["name"],
                "tier": e["tier"],
                "location": e.get("location"),
                "status": {k: e.get(k) for k in ("healthy", "heartbeat_age", "reachable", "error")},
            }
            for e in entries
        ]
    else:
        clusters = kb.list_clusters()
        inventory = kb.inventory()
    placements = kb.request("GET", f"{API}/placements")["placements"]
    workloads = kb.list_workloads()
    recent = kb.list_events(limit=events)
    facts = {c["name"]: c for c in inventory.get("clusters", [])}
    running = _running(placements, workloads)
    tiers: dict[str, list[dict[str, Any]]] = {t: [] for t in TIERS}
    for c in sorted(clusters, key=lambda c: c["name"]):
        tiers.setdefault(c["tier"], []).append(
            _cluster(
                c, facts.get(c["name"]) or {"name": c["name"], "tier": c["tier"]}, running.get(c["name"], [])
            )
        )
    return {
        "kb": kb.url,
        "time": time.time(),
        "tiers": tiers,
        "applications": sorted(p["application"] for p in placements),
        "controller": (ctl := _controller(controllers, placements, recent, timeout)),
        "survivability": survivability(kb, ctl),
        "events": recent,
    }


def survivability(kb: KBClient, controller: dict[str, Any]) -> dict[str, Any] | None:
    """The N-1 survivability verdict (controller/survival.py): the leader's last report when a
    replica answered with one (``source: controller``, live), else the last fleet verdict a
    controller recorded among the KB's newest events (``source: kb``, as of that event); None
    when neither is known."""
    found = controller.get("survivability")
    if isinstance(found, dict) and found.get("state") == "computed":
        return {"source": "controller", **found}
    from qonnect.controller.survival import FLEET, SEED_EVENTS

    try:
        events = kb.list_events(limit=SEED_EVENTS)
    except KBError:
        return None
    ours = [e for e in events if e.get("type") == FLEET and e.get("role") == "controller"]
    if not ours:
        return None
    event = max(ours, key=lambda e: e.get("id", 0))
    data = event.get("data") or {}
    bad = data.get("not_survivable") or {}
    return {
        "source": "kb",
        "state": "recorded",
        "recorded_at": event.get("ts"),
        "survivable": bool(data.get("survivable")),
        "not_survivable": sorted(bad),
        "applications": {
            n: {"survivable": False, "violations": [{"scenario": s, "shortfall": ""}]} for n, s in bad.items()
        },
        "first_shortfall": data.get("first_shortfall"),
        "spare": data.get("spare") or {},
        "message": event.get("message", ""),
    }


def _cluster(
    record: dict[str, Any], inventoried: dict[str, Any], apps: list[dict[str, Any]]
) -> dict[str, Any]:
    """One cluster's line: its KB record (health) and its inventory entry (nodes, free capacity)."""
    status = record.get("status") or {}
    nodes = inventoried.get("nodes") or []
    try:
        free = free_capacity(inventoried)
    except InventoryError as exc:
        raise UserError(f"the KB's inventory is malformed: {exc}") from None
    return {
        "name": record["name"],
        "tier": record["tier"],
        "location": record.get("location"),
        "health": health(status),
        "healthy": bool(status.get("healthy")),
        "heartbeat_age": status.get("heartbeat_age"),
        "error": status.get("error"),
        "nodes": len(nodes),
        "nodes_ready": sum(1 for n in nodes if n.get("ready")),
        "free": {"cpu": round(free["cpu"], 3), "memory": int(free["memory"])},
        "energy_kwh": _mean(n.get("energy_kwh") for n in nodes),
        "price_eur_h": _mean(n.get("price_eur_h") for n in nodes),
        "running": apps,
    }


def health(status: dict[str, Any]) -> str:
    """One word for a cluster's state, as the detector would see it."""
    if status.get("healthy"):
        return "healthy"
    if status.get("heartbeat_age") is None:
        return "no-reports"
    if status.get("reachable") is False:
        return "unreachable"
    return "stale"


def _mean(values: Any) -> float | None:
    known = [float(v) for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _running(
    placements: list[dict[str, Any]], workloads: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """cluster -> [{application, service, replicas, ready, desired, status, reason}] from
    placements and agent reports.

    A service may have several workloads (Bookinfo's reviews runs v1, v2 and v3), so readiness is
    counted in pods over every workload of the service: ``ready`` of ``desired``. Those counts
    include an old revision's pods, which keep serving while a new one fails, so a workload the
    agent reports not Healthy gives the service its ``status`` (Failed before Progressing) and
    ``reason`` (its pods' own, k8s/reasons.py): "1/1 pods ready" would hide a failing rollout.
    """
    ready: dict[tuple[str, str, str], int] = {}
    desired: dict[tuple[str, str, str], int] = {}
    trouble: dict[tuple[str, str, str], tuple[str, str]] = {}
    for w in workloads:
        if w.get("application") and w.get("service"):
            key = (w["cluster"], w["application"], w["service"])
            ready[key] = ready.get(key, 0) + int(w.get("ready_replicas") or 0)
            desired[key] = desired.get(key, 0) + int(w.get("replicas") or 0)
            state = w.get("status") or HEALTHY
            if state != HEALTHY and (key not in trouble or state == FAILED != trouble[key][0]):
                name = f"{w.get('kind') or 'workload'}/{w.get('name') or '?'}"
                trouble[key] = (state, f"{name}: {w.get('reason') or 'not ready'}")
    out: dict[str, list[dict[str, Any]]] = {}
    for record in placements:
        app = record["application"]
        for service, entries in sorted(current_placement(record).items()):
            for entry in entries:
                key = (entry["cluster"], app, service)
                out.setdefault(entry["cluster"], []).append(
                    {
                        "application": app,
                        "service": service,
                        "replicas": int(entry.get("replicas", 1)),
                        "ready": ready.get(key),
                        "desired": desired.get(key),
                        "status": trouble[key][0] if key in trouble else (HEALTHY if key in ready else None),
                        "reason": trouble[key][1] if key in trouble else "",
                        # a copy started while another cluster is suspect (hedged failover)
                        "role": entry.get("role") or "active",
                    }
                )
    return out


def _controller(
    urls: list[str], placements: list[dict[str, Any]], events: list[dict[str, Any]], timeout: float
) -> dict[str, Any]:
    """Leader and term from the replicas' status endpoints; the KB's newest fencing term."""
    from qonnect.controller.cli import fetch_status

    terms = [int((p.get("fencing") or {}).get("term") or 0) for p in placements]
    terms += [e["ref"]["term"] for e in events if journal.trusted(e)]
    terms = [t for t in terms if t > 0]  # term 0: written without a controller's token
    replicas: list[dict[str, Any]] = []
    for url in urls:
        st = fetch_status(url, timeout)
        if isinstance(st, str):
            replicas.append({"url": url, "reachable": False, "error": st})
        else:
            replicas.append(
                {
                    "url": url,
                    "reachable": True,
                    "name": st.get("name"),
                    "node": st.get("node"),
                    "state": st.get("state"),
                    "term": st.get("term"),
                    "leader": st.get("leader"),
                    **({"survivability": st["survivability"]} if st.get("survivability") else {}),
                }
            )
    leading = [r for r in replicas if r.get("state") == "leader"]
    found = max(leading, key=lambda r: r["term"] or 0).get("survivability") if leading else None
    knowing = [r for r in replicas if r.get("leader")]
    leader = term = None
    if leading:
        best = max(leading, key=lambda r: r["term"] or 0)
        leader, term = best.get("name") or best["node"], best["term"]
    elif knowing:  # followers name the leader by its Raft address
        best = max(knowing, key=lambda r: r["term"] or 0)
        names = {r["node"]: r.get("name") for r in replicas if r.get("node")}
        leader, term = names.get(best["leader"]) or best["leader"], best["term"]
    for r in replicas:  # the report is the leader's, shown once (below), not per replica
        r.pop("survivability", None)
    return {
        "leader": leader,
        "term": term,
        "replicas": replicas,
        "kb_fencing_term": max(terms) if terms else None,
        **({"survivability": found} if found else {}),
    }


# -- text ----------------------------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    """The status document as text for people."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["time"]))
    lines = [f"qonnect federation at {doc['kb']} ({when})", ""]
    ctl = doc["controller"]
    fence = ctl["kb_fencing_term"]
    fence_text = f"; newest fencing term in the KB: {fence}" if fence is not None else ""
    if ctl["leader"]:
        lines.append(f"controller: leader {ctl['leader']}, term {ctl['term']}{fence_text}")
    else:
        why = "no replica answered" if ctl["replicas"] else "not recorded in the KB; pass --controller URL"
        lines.append(f"controller: leader unknown ({why}){fence_text}")
    for r in ctl["replicas"]:
        state = r["state"] if r["reachable"] else f"UNREACHABLE ({r['error']})"
        lines.append(
            f"  {r.get('name') or r['url']}: {state}" + (f" term {r['term']}" if r["reachable"] else "")
        )
    lines += _survivability_lines(doc.get("survivability"))
    if "summary" in doc:
        lines += _summary_lines(doc["summary"])
    for tier, clusters in doc.get("tiers", {}).items():
        up = sum(1 for c in clusters if c["healthy"])
        lines += ["", f"{tier.upper()} ({up}/{len(clusters)} healthy)"]
        if not clusters:
            lines.append("  (no clusters)")
        for c in clusters:
            lines.append(
                f"  {c['name']:<14} {c['health']:<11} {_age(c['heartbeat_age']):>6}  "
                f"nodes {c['nodes_ready']}/{c['nodes']}  free {c['free']['cpu']:g} cpu "
                f"{c['free']['memory'] / 2**30:.1f} GiB  energy {_num(c['energy_kwh'], 'kWh')}  "
                f"price {_num(c['price_eur_h'], 'EUR/h')}"
            )
            for a in c["running"]:
                ready = "" if a["ready"] is None else f" ({a['ready']}/{a['desired']} pods ready)"
                if a.get("reason"):  # the counts may be an old revision's pods: say what fails
                    ready = f" ({a['status']}: {_short(a['reason'], REASON_WIDTH)})"
                standby = " standby" if a.get("role") == "standby" else ""
                lines.append(f"      {a['application']}/{a['service']} x{a['replicas']}{standby}{ready}")
    lines += ["", f"applications: {', '.join(doc['applications']) or 'none placed'}", "", "last events:"]
    if not doc["events"]:
        lines.append("  none")
    for e in doc["events"]:
        stamp = time.strftime("%H:%M:%S", time.localtime(e["ts"]))
        scope = "/".join(x for x in (e.get("application"), e.get("cluster")) if x)
        lines.append(f"  {stamp} {e['type']:<32} {scope:<20} {_short(e.get('message', ''))}".rstrip())
    return "\n".join(lines)


def _survivability_lines(doc: dict[str, Any] | None) -> list[str]:
    """Survivable or not per application (those that are not, with the scenario and shortfall),
    the first shortfall and the least spare capacity per tier."""
    if not doc:
        return ["survivability (N-1): unknown (no leader answered with a report; none recorded in the KB)"]
    if doc.get("source") == "controller":
        from qonnect.controller.status import survivability_lines

        return survivability_lines(doc)
    when = time.strftime("%H:%M:%S", time.localtime(doc.get("recorded_at") or 0))
    lines = [
        f"survivability (N-1): {'yes' if doc['survivable'] else 'NO'} "
        f"(as the controller recorded it at {when}; --controller URL for the live report)"
    ]
    lines += [f"  {n}: not if {a['violations'][0]['scenario']}" for n, a in doc["applications"].items()]
    first = doc.get("first_shortfall")
    if first:
        lines.append(f"  first shortfall: {first['scenario']}: {first['application']}: {first['text']}")
    for tier, free in sorted((doc.get("spare") or {}).items()):
        lines.append(f"  least spare in {tier}: {free.get('cpu_text', '-')}, {free.get('memory_text', '-')}")
    return lines


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    """A large federation: counts per tier, then every cluster that is not healthy."""
    lines = [
        "",
        f"clusters: {summary['healthy']}/{summary['clusters']} healthy "
        "(a summary; --all lists every cluster)",
    ]
    tiers = summary.get("tiers") or {}
    for tier in [*TIERS, *sorted(set(tiers) - set(TIERS))]:
        counts = tiers.get(tier) or {"clusters": 0, "healthy": 0}
        lines.append(f"  {tier.upper():<6} {counts['healthy']}/{counts['clusters']} healthy")
    sick = summary.get("unhealthy") or []
    lines += ["", f"not healthy ({len(sick)}):" if sick else "not healthy: none"]
    for c in sick:
        why = health(
            {"healthy": False, "heartbeat_age": c.get("heartbeat_age"), "reachable": c.get("reachable")}
        )
        error = f"  {_short(c['error'], 60)}" if c.get("error") else ""
        lines.append(f"  {c['name']:<14} {c['tier']:<6} {why:<11} {_age(c.get('heartbeat_age')):>6}{error}")
    return lines


def _age(age: float | None) -> str:
    return "-" if age is None else f"{age:.0f}s"


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g} {unit}"


def _short(message: str, width: int = 90) -> str:
    text = " ".join(message.split())
    return text if len(text) <= width else text[: width - 3] + "..."
