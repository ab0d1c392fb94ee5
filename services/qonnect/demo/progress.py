"""What the demo prints: step headers, progress lines while waiting, and the summary table.

Every wait goes through :func:`wait_until`, so no step is ever silent for more than a few
seconds and every wait has a deadline.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROGRESS_EVERY = 3.0


def say(text: str = "") -> None:
    print(text, flush=True)


def header(title: str) -> None:
    say()
    say(f"=== {title}")


class StepFailed(Exception):
    """A step did not reach its expected state; the message says which and what was seen."""


@dataclass
class Result:
    """One row of the summary table."""

    step: str
    ok: bool
    what: str
    seconds: float


def wait_until(
    check: Callable[[], tuple[Any, str]],
    timeout: float,
    what: str,
    started: float | None = None,
    interval: float = 0.5,
) -> Any:
    """Poll ``check()`` -> (value, state text) until value is truthy.

    Prints the state every few seconds (with the seconds since ``started``); raises StepFailed
    naming ``what`` and the last state when ``timeout`` passes.
    """
    t0 = time.monotonic() if started is None else started
    deadline = time.monotonic() + timeout
    next_line = time.monotonic() + PROGRESS_EVERY
    state = "nothing observed yet"
    while True:
        try:
            value, state = check()
        except StepFailed:
            raise
        except Exception as exc:  # the KB or a replica may be briefly away: say so, keep polling
            value, state = None, f"cannot read yet: {exc}"
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise StepFailed(f"timed out after {timeout:g}s waiting for {what}; last seen: {state}")
        if now >= next_line:
            say(f"  [{now - t0:5.1f}s] waiting for {what}: {state}")
            next_line = now + PROGRESS_EVERY
        time.sleep(interval)


def watch(seconds: float, check: Callable[[], str], started: float) -> None:
    """Call ``check()`` (which raises StepFailed when something is wrong) for ``seconds``,
    printing what it reports every few seconds."""
    deadline = time.monotonic() + seconds
    next_line = time.monotonic() + PROGRESS_EVERY
    while time.monotonic() < deadline:
        try:
            state = check()
        except StepFailed:
            raise
        except Exception as exc:  # the KB briefly away is not a move
            state = f"cannot read: {exc}"
        if time.monotonic() >= next_line:
            say(f"  [{time.monotonic() - started:5.1f}s] {state}")
            next_line = time.monotonic() + PROGRESS_EVERY
        time.sleep(0.5)


def table(results: list[Result], width: int = 100) -> str:
    """The summary table: step, outcome, what happened (wrapped at ``width``), seconds."""
    Row = tuple[str, str, str, str]
    rows: list[Row | None] = [("step", "result", "what happened", "seconds"), None]
    for r in results:
        lines = textwrap.wrap(r.what, width) or [""]
        rows.append((r.step, "ok" if r.ok else "FAILED", lines[0], f"{r.seconds:.1f}"))
        rows += [("", "", line, "") for line in lines[1:]]
    cells = [row for row in rows if row]
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    out = []
    rule: Row = ("-" * widths[0], "-" * widths[1], "-" * widths[2], "-" * 7)
    for row in rows:
        cols = row or rule
        out.append(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cols[:3])) + "  " + cols[3].rjust(7)
        )
    return "\n".join(line.rstrip() for line in out)


def fail(message: str) -> None:
    print(f"qonnect demo: {message}", file=sys.stderr, flush=True)
