"""A current placement naming its cluster with something that is not a name (found by mypy:
the engine looked such a value up in a dict of cluster names and raised TypeError).

The engine's contract is that malformed entries of the current placement are ignored, whether
the placement comes as ``current`` or in a given (what-if) inventory's ``placements``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.placement import place
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application

ROOT = Path(__file__).resolve().parents[4]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
}
APP = load_application(
    {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "t"},
        "spec": {
            "objective": {"energy": 1.0},
            "services": [{"name": "s", "tier": "fog", "manifests": [POD]}],
        },
    }
)
NOT_NAMES = [["fog-3"], {"name": "fog-3"}, None, 3]


@pytest.mark.parametrize("cluster", NOT_NAMES, ids=repr)
def test_a_current_entry_whose_cluster_is_no_name_is_ignored(cluster):
    current = {"s": [{"cluster": cluster, "replicas": 1}]}
    assert place(APP, PAPER, current=current).clusters("s") == place(APP, PAPER).clusters("s")


@pytest.mark.parametrize("cluster", NOT_NAMES, ids=repr)
def test_a_what_if_inventory_placement_whose_cluster_is_no_name_is_ignored(cluster):
    inventory = copy.deepcopy(PAPER)
    inventory["placements"] = {"t": {"s": [{"cluster": cluster, "replicas": 1}]}}
    assert place(APP, inventory).clusters("s") == place(APP, PAPER).clusters("s")
