"""The ``qonnect`` command: one entry point, one sub-command per component.

Each component package exposes ``add_parser(subparsers)`` which registers its sub-command and
sets ``func`` on the parsed namespace. Components are imported lazily so that, e.g.,
``qonnect testbed`` does not pay for importing the controller's dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# sub-command name -> module exposing add_parser(subparsers)
COMPONENTS = {
    "testbed": "qonnect.testbed.cli",
    "kb": "qonnect.kb.cli",
    "agent": "qonnect.agent.cli",
    "controller": "qonnect.rla.cli",
    "status": "qonnect.status",
    "plan": "qonnect.plan",
    "demo": "qonnect.demo.cli",
}


class UserError(Exception):
    """An error caused by the user's input or environment: printed without a traceback."""


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qonnect", description="QoS-aware placement of applications across Kubernetes clusters."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = next((a for a in argv if a in COMPONENTS), None)
    for name, module in COMPONENTS.items():
        if wanted is not None and name != wanted:
            sub.add_parser(name, help=f"(see 'qonnect {name} --help')")
            continue
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"qonnect {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run through the imported module so components raise the same UserError class main() catches.
    from qonnect.cli import main as _entry

    sys.exit(_entry())
