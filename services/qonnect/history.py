"""``qonnect history APP``: what happened to an application, newest first.

Each row is one placement change the KB recorded (services/qonnect/kb, ``/history``): the
version, the service, from -> to clusters, why (a user's deploy, cluster-down, qos-drift,
spec-changed, rollback, ...), who (admin: a user; controller), the decision, the outcome and how
long it took; above them each stored version's status (ready where it ran Ready, failed where
it failed). ``qonnect rollback`` (services/qonnect/rollback.py) shares the KB connection options.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.errors import UserError
from qonnect.status import kb_token

MAX_LIMIT = 500  # the KB's page bound


def kb_arguments(p: argparse.ArgumentParser, role: str = "a reader token is enough") -> None:
    """The KB connection options every command that reads or writes the KB takes."""
    p.add_argument(
        "--kb", default=os.environ.get("QONNECT_KB_URL"), help="Knowledge Base URL (default: $QONNECT_KB_URL)"
    )
    p.add_argument(
        "--token-file", help=f"file holding a KB bearer token ({role}; default: $QONNECT_KB_TOKEN)"
    )
    p.add_argument("--ca", help="CA bundle to verify the KB's certificate")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")


def connect(args: argparse.Namespace) -> KBClient:
    """A KB client from --kb / --token-file (or $QONNECT_KB_URL / $QONNECT_KB_TOKEN)."""
    if not args.kb:
        raise UserError("--kb: expected the KB URL (or set QONNECT_KB_URL)")
    try:
        return KBClient(args.kb, kb_token(args), ca_path=args.ca, timeout=args.timeout)
    except KBError as exc:
        raise UserError(f"--kb: {exc.message}") from None


def kb_failure(kb: KBClient, what: str, exc: KBError) -> UserError:
    """A KB error as one line naming what failed (never a traceback)."""
    if exc.status in (401, 403):
        return UserError(f"{what}: the KB at {kb.url} refused the token ({exc.message})")
    return UserError(f"{what}: {exc.message}" if exc.status else f"cannot reach the KB at {kb.url}: {exc}")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "history",
        help="show an application's placement changes and its versions' status",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("app", metavar="APP", help="the application's name")
    kb_arguments(p)
    p.add_argument("--limit", type=int, default=20, help=f"rows to show, newest first (1..{MAX_LIMIT})")
    p.add_argument("--before", type=int, metavar="ID", help="rows older than this row id (the next page)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


def collect(kb: KBClient, app: str, limit: int, before: int | None = None) -> dict[str, Any]:
    """The application's history page and its versions' status, as one document."""
    try:
        page = kb.history(app, limit=limit, before=before)
        versions = kb.application_versions(app)
    except KBError as exc:
        raise kb_failure(kb, f"history of {app}", exc) from None
    return {
        "application": app,
        "versions": [
            {
                "version": v["version"],
                "created": v["created"],
                "status": v.get("status") or {"state": "pending", "ready": [], "failed": []},
                **({"rollback": v["rollback"]} if v.get("rollback") else {}),
            }
            for v in versions
        ],
        "history": page["history"],
        "next": page.get("next"),
    }


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _clusters(names: list[str]) -> str:
    return ",".join(names) or "-"


def version_line(v: dict[str, Any]) -> str:
    status = v["status"]
    parts = [f"version {v['version']}: {status['state']}"]
    if status.get("ready"):
        parts.append(f"ready on {', '.join(status['ready'])}")
    if status.get("failed"):
        parts.append(f"failed on {', '.join(status['failed'])}")
    if v.get("rollback"):
        rb = v["rollback"]
        parts.append(f"rollback of version {rb.get('failing')} to version {rb.get('restores')}'s spec")
    return "  " + "; ".join(parts)


def render(doc: dict[str, Any]) -> str:
    """The versions, then a table of the history rows, newest first."""
    lines = [f"{doc['application']}: versions"]
    lines += [version_line(v) for v in doc["versions"]] or ["  (none stored)"]
    rows = doc["history"]
    if not rows:
        lines.append("no placement changes recorded")
        return "\n".join(lines)
    head = ("WHEN", "VERSION", "SERVICE", "FROM -> TO", "TRIGGER", "BY", "DECISION", "OUTCOME", "TOOK")
    table = [head] + [
        (
            _when(r["ended"]),
            str(r["version"] if r.get("version") is not None else "-"),
            r["service"],
            f"{_clusters(r['from'])} -> {_clusters(r['to'])}",
            r["trigger"],
            "user" if r.get("by") == "admin" else str(r.get("by") or "-"),
            r.get("decision") or "-",
            r["outcome"],
            f"{r['duration']:.1f}s",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines.append("")
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    for r in rows:
        if r["outcome"] != "succeeded" and r.get("detail"):
            lines.append(f"  {r['service']} v{r.get('version')}: {r['outcome']}: {r['detail']}")
    if doc.get("next"):
        lines.append(f"(older rows: --before {doc['next']})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LIMIT:
        raise UserError(f"--limit: expected 1..{MAX_LIMIT}, got {args.limit}")
    kb = connect(args)
    doc = collect(kb, args.app, args.limit, args.before)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0
