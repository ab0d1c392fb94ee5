"""Which JSON values the KB can store and serve again unchanged.

Python's json module accepts NaN/Infinity and lone surrogates (``"\\udc00"``) and nests as deep
as the stack allows; stored, such a value breaks every later answer that contains it (UTF-8
encoding, strict JSON, the response serializer's depth limit). The KB refuses them on the way in
and skips them on the way out.
"""

from __future__ import annotations

import math
from typing import Any

# Deeper than any real manifest (Kubernetes objects nest ~15 levels); the response serializer
# and the QoS validator both recurse, so a bound here keeps a spec from ever reaching them.
MAX_DEPTH = 64
MAX_PROBLEMS = 20


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired surrogate characters (not valid UTF-8)"
    return None


def storable_problems(value: Any, root: str = "") -> list[str]:
    """'path: problem' for every value JSON over UTF-8 cannot carry faithfully: lone surrogates,
    NUL, NaN/Infinity, nesting deeper than MAX_DEPTH. Iterative, so no input can exhaust the
    stack; at most MAX_PROBLEMS are listed."""
    problems: list[str] = []
    stack: list[tuple[str, Any, int]] = [(root, value, 0)]
    while stack and len(problems) < MAX_PROBLEMS:
        path, item, depth = stack.pop()
        where = path or "spec"
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                problems.append(f"{where}: nested deeper than {MAX_DEPTH} levels")
                continue
            for key, child in reversed(list(item.items())):
                key_problem = _string_problem(key) if isinstance(key, str) else None
                if key_problem:
                    problems.append(f"{where}: a key {key_problem}")
                    continue
                stack.append((_child(path, key), child, depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                problems.append(f"{where}: nested deeper than {MAX_DEPTH} levels")
                continue
            stack.extend((_child(path, i), child, depth + 1) for i, child in reversed(list(enumerate(item))))
        elif isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                problems.append(f"{where}: {problem}")
        elif isinstance(item, float) and not math.isfinite(item):
            problems.append(f"{where}: {item!r} is not a finite number (NaN/Infinity are not JSON)")
    return problems
