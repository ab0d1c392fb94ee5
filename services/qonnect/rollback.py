"""``qonnect rollback APP --to VERSION``: store an older version's spec again as the newest.

The KB's ``/rollback`` operation (the one the controller uses for a version that fails on
several clusters): the spec of VERSION becomes a new version, marked as a rollback of the
current one, and the controller places it like any new version (the KB refuses, with 409, when
another version was stored in between). Needs an admin token.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

from qonnect.errors import UserError
from qonnect.history import connect, kb_arguments, kb_failure


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "rollback",
        help="store an older version's spec again as an application's newest version",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("app", metavar="APP", help="the application's name")
    p.add_argument("--to", type=int, required=True, metavar="VERSION", help="the stored version to restore")
    p.add_argument("--reason", default="", help="why (recorded with the new version)")
    kb_arguments(p, "an admin token")
    p.add_argument("--json", action="store_true", help="print the KB's answer as JSON")
    p.set_defaults(func=run)


def roll_back(kb: KBClient, app: str, to: int, reason: str) -> dict[str, Any]:
    """Restore version ``to`` of ``app`` as its newest version; a clear error otherwise."""
    try:
        current = kb.get_application(app)["version"]
    except KBError as exc:
        raise kb_failure(kb, f"rollback of {app}", exc) from None
    if to >= current:
        raise UserError(
            f"--to: {app} is at version {current}; a rollback restores an older version (1..{current - 1})"
        )
    why = reason or f"rolled back by the user from version {current} to version {to}"
    try:
        return kb.roll_back(app, current, to, why)
    except KBError as exc:
        raise kb_failure(kb, f"rollback of {app} to version {to}", exc) from None


def run(args: argparse.Namespace) -> int:
    if args.to < 1:
        raise UserError(f"--to: expected a version >= 1, got {args.to}")
    kb = connect(args)
    done = roll_back(kb, args.app, args.to, args.reason)
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        rb = done["rollback"]
        print(
            f"{args.app}: version {done['version']} stored with the spec of version {rb['restores']} "
            f"(rollback of version {rb['failing']}); the controller places it like any new version"
        )
    return 0
