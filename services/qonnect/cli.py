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

from qonnect.errors import UserError

__all__ = ["UserError", "main"]

# sub-command name -> module exposing add_parser(subparsers)
COMPONENTS = {
    "testbed": "qonnect_testbed.cli",
    "kb": "qonnect.kb.cli",
    "agent": "qonnect.agent.cli",
    "controller": "qonnect.controller.cli",
    "status": "qonnect.status",
    "history": "qonnect.history",
    "rollback": "qonnect.rollback",
    "plan": "qonnect.plan",
    "survivability": "qonnect.survivability",
    "demo": "qonnect.demo.cli",
}


# what to install for each component's dependencies: an extra of qonnect (services/pyproject.toml),
# or the separate qonnect-testbed distribution (testbed/pyproject.toml) for test clusters
INSTALL_HINTS = {
    "testbed": "pip install qonnect-testbed (from a checkout: pip install -e testbed)",
    "demo": "pip install 'qonnect[all]' qonnect-testbed (from a checkout: make setup)",
    "kb": "pip install 'qonnect[kb]'",
    "agent": "pip install 'qonnect[agent]'",
    "controller": "pip install 'qonnect[controller]'",
}


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
        try:
            component = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] in ("qonnect", "ansible_collections"):
                raise
            hint = INSTALL_HINTS.get(name, "pip install 'qonnect[all]'")
            if wanted is None:  # `qonnect --help` lists it all the same
                sub.add_parser(name, help=f"(needs {exc.name!r}: {hint})")
                continue
            raise UserError(f"qonnect {name} needs the Python package {exc.name!r}: {hint}") from None
        component.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
    except UserError as exc:
        print(f"qonnect: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    caught: tuple[type[Exception], ...] = (UserError, *user_errors(args.command))
    try:
        return int(args.func(args) or 0)
    except caught as exc:
        print(f"qonnect {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def user_errors(command: str) -> tuple[type[Exception], ...]:
    """The error types a component declares as the user's (``USER_ERRORS``): printed like
    UserError, so a component such as the testbed need not import the product to raise one."""
    module = sys.modules.get(COMPONENTS.get(command, ""))
    return tuple(getattr(module, "USER_ERRORS", ()))


if __name__ == "__main__":
    sys.exit(main())
