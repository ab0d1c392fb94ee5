# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes label-selector semantics, shared by the placement filters (cluster selectors in a
QoS spec), the Resource Agent (workload selectors read from the cluster) and the testbed's API
server (labelSelector query strings, whose `>`/`<` are the Gt/Lt operators)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def labels_match(
    labels: Mapping[str, str],
    match_labels: Mapping[str, Any] | None = None,
    match_expressions: Sequence[Mapping[str, Any]] | None = None,
) -> bool:
    """True when ``labels`` satisfy every matchLabels entry and every matchExpressions item."""
    for name, value in (match_labels or {}).items():
        if labels.get(name) != value:
            return False
    for expr in match_expressions or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = isinstance(key, str) and key in labels
        label = labels[key] if isinstance(key, str) and present else None
        if op == "In" and not (present and label in values):
            return False
        if op == "NotIn" and present and label in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt") and not _compares(label, values, op):
            return False
    return True


def _compares(label: str | None, values: Sequence[Any], op: str) -> bool:
    """Gt/Lt compare integers; an absent or non-integer label never matches."""
    if label is None:
        return False
    try:
        number, bound = int(label), int(values[0])
    except (TypeError, ValueError, IndexError):
        return False
    return number > bound if op == "Gt" else number < bound
