"""Deployer.converge: the one-cluster step the controller's reconciler uses (a public API, so the
reconciler does not drive the Deployer's private phases)."""

from __future__ import annotations

import ast
from pathlib import Path

from support.shop_cases import PLAN_A, PLAN_B, deployer

RECONCILE = Path(__file__).resolve().parents[5] / "services" / "qonnect" / "controller" / "reconcile.py"


def test_converge_prunes_a_cluster_the_plan_left_and_touches_no_other(fleet):
    clusters, log = fleet
    deployer(clusters, PLAN_A).run()
    clusters["c3"].down = True  # the new home is not reached: converge acts on c2 alone
    start = len(log)
    steps: list[str] = []
    result = deployer(clusters, PLAN_B, previous={"c2"}, before_step=steps.append).converge("c2")
    assert steps == ["apply", "switch", "prune"]
    assert result.status == "ok" and result.in_plan is False
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is None
    assert {op[0] for op in log[start:]} == {"c2"}


def test_converge_applies_the_clusters_share(fleet):
    clusters, _log = fleet
    result = deployer(clusters, PLAN_A).converge("c1")
    assert result.status == "ok"
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop")["spec"]["replicas"] == 2
    assert clusters["c2"].get("apps/v1", "Deployment", "back-v1", "shop") is None  # another cluster's


def test_the_reconciler_uses_only_the_deployers_public_api():
    tree = ast.parse(RECONCILE.read_text(), str(RECONCILE))
    private = [
        f"reconcile.py:{n.lineno} {ast.unparse(n)}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
        and isinstance(n.value, ast.Name)
        and n.value.id not in ("self", "cls")
    ]
    assert private == []
