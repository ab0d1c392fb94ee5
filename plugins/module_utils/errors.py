# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One error base for every failure a module reports, and its one mapping to fail_json.

Each layer keeps its own error class (a bad spec, the KB, a cluster, the placement engine, the
fence) but derives it from :class:`QonnectError`, whose fields come from the error's attributes.
So the same error reads the same in every module, whichever layer raised it. Nothing here
imports the rest of the collection: every layer can import it.
"""

from __future__ import annotations

from typing import Any

MAX_ERRORS_IN_MSG = 20
# Attributes an error may carry that become fail_json fields of the same name.
FIELDS = ("errors", "path", "status", "cluster", "service", "constraint")


def listed(summary: str, errors: list[str]) -> str:
    """A one-line message naming every problem (up to MAX_ERRORS_IN_MSG), so the default
    callback's single line already shows the paths."""
    shown = errors[:MAX_ERRORS_IN_MSG]
    count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}"
    msg = f"{summary} ({count}): " + "; ".join(shown)
    more = len(errors) - len(shown)
    return msg + (f"; and {more} more (see errors)" if more else "")


class QonnectError(Exception):
    """A failure the user can act on (bad input, the KB or a cluster said no, no plan).

    Subclasses set the attributes in FIELDS they know; ``summary`` heads the message of an
    error that lists several problems in ``errors``.
    """

    summary = "invalid input"
    lead = ""  # where it happened, before the message ("not stored: ...")
    hint = ""  # what it likely means, after the message

    def with_context(self, lead: str = "", hint: str = "") -> QonnectError:
        """The same error said where it happened; its fields stay, so callers re-raise it."""
        self.lead = lead or self.lead
        self.hint = hint or self.hint
        return self

    def fail_fields(self) -> dict[str, Any]:
        """The keyword arguments of fail_json for this error."""
        fields = {name: getattr(self, name) for name in FIELDS if getattr(self, name, None) is not None}
        errors = fields.get("errors")
        msg = listed(self.summary, errors) if errors else str(self)
        if self.lead:
            msg = f"{self.lead}: {msg}"
        if self.hint:
            msg = f"{msg} ({self.hint})"
        return {"msg": msg, **fields}


class InputError(QonnectError, ValueError):
    """A module option, or a part of one, that cannot be used; ``path`` names it."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def unexpected(exc: BaseException) -> str:
    """The message for an error no check foresaw (a bug): its type and text, no traceback."""
    return f"unexpected {type(exc).__name__}: {str(exc)[:500]} (please report this as a bug)"


def fail_fields(exc: BaseException) -> dict[str, Any]:
    """fail_json arguments for any exception: a QonnectError maps itself; a plain ValueError is
    bad input from a helper (its message names the path); anything else is a bug, still told
    in one line rather than a bare "MODULE FAILURE"."""
    if isinstance(exc, QonnectError):
        return exc.fail_fields()
    if isinstance(exc, ValueError):
        return {"msg": str(exc)}
    return {"msg": unexpected(exc)}
