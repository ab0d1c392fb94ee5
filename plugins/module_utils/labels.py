# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes label-selector semantics, shared by the placement filters (cluster selectors in a
QoS spec) and the Resource Agent (workload selectors read from the cluster)."""

from __future__ import annotations


def labels_match(
    labels: dict, match_labels: dict | None = None, match_expressions: list | None = None
) -> bool:
    """True when ``labels`` satisfy every matchLabels entry and every matchExpressions item."""
    for key, value in (match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for expr in match_expressions or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True
