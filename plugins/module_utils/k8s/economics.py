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


# the direction in which each figure attracts work (placement prefers low price and energy)
_MORE_FAVOURABLE = {
    "price_eur_h": lambda new, old: new < old,
    "energy_kwh": lambda new, old: new < old,
    "bandwidth_gbps": lambda new, old: new > old,
}


def gate_economics(gathered: dict, existing: dict) -> tuple[dict, list[str]]:
    """The node economics a re-registration may take from node labels without approval, and
    what it holds back.

    A member cluster's admin can set node labels; copying them unreviewed into the registration
    would let them make the cluster look cheaper or greener and pull work (issue 25). So without
    approval a label may only make a node *less* favourable than registered (a higher price or
    energy, a lower bandwidth); a more favourable value, a value where none was registered, and
    a removed label keep the registered economics and are listed (``held``)."""
    registered = existing.get("node_economics") or {}
    default = existing.get("economics") or {}
    out = {node: dict(values) for node, values in registered.items()}
    held: list[str] = []
    for node in sorted(set(gathered) | set(registered)):
        new, old = gathered.get(node) or {}, registered.get(node) or {}
        for field, better in _MORE_FAVOURABLE.items():
            before, after = old.get(field, default.get(field)), new.get(field)
            if after is None:
                if field in old:
                    held.append(f"node {node}: {field} label removed, registered {old[field]:g} kept")
            elif before is not None and not better(after, before):
                out.setdefault(node, {})[field] = after
            else:
                shown = "none" if before is None else f"{before:g}"
                held.append(f"node {node}: {field} {shown} -> {after:g} from its label needs approval")
    return {node: values for node, values in out.items() if values}, held
