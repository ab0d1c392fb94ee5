# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node economics from node labels read with the admin's kubeconfig, for the cluster record.

The Knowledge Base takes a node's price, energy and bandwidth only from the cluster's
registration, never from agent reports (issue 25: an agent token is easier to steal than an admin
kubeconfig). Registering with ``gather_nodes`` reads the ``qonnect.io/price-eur-h``,
``qonnect.io/energy-kwh`` and ``qonnect.io/bandwidth-gbps`` labels here, with the admin's own
credentials, so the registration carries what the cluster's nodes declare.
"""

from __future__ import annotations

import math

from ansible_collections.qonnect.core.plugins.module_utils.keys import (
    BANDWIDTH_LABEL,
    ENERGY_LABEL,
    PRICE_LABEL,
)

ECONOMIC_LABELS = {PRICE_LABEL: "price_eur_h", ENERGY_LABEL: "energy_kwh", BANDWIDTH_LABEL: "bandwidth_gbps"}


def _number(text: object) -> float | None:
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def node_economics(nodes: list[dict]) -> dict[str, dict[str, float]]:
    """{node name: {price_eur_h, energy_kwh, bandwidth_gbps}} of the nodes that declare any."""
    out: dict[str, dict[str, float]] = {}
    for node in nodes:
        labels = node.get("labels") or {}
        found = {
            field: value
            for label, field in ECONOMIC_LABELS.items()
            if label in labels and (value := _number(labels[label])) is not None
        }
        if found and node.get("name"):
            out[node["name"]] = found
    return out
