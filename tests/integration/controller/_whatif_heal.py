"""What-if against the real heal (issue 37), on either engine: ``qonnect plan --fail X`` is
asked before cluster X fails; then X fails and the controller heals; every application the
what-if re-placed must end on the clusters it said, service by service, and every other one
stay where it ran.

The federation: a KB, three clusters of the paper profile (6 CPU each) with their agents, three
two-service applications deployed with the user's playbook and one controller replica. Two prefer
energy and request 1.4 CPU per service: they share one cluster, and once it fails they are healed
in one batch, in name order, against each other's capacity; the third runs on the edge cluster
(1 CPU), so the cluster they heal to has room for three of their four services, not four. Its cluster grace (15 s) is past the nodes'
heartbeat timeout, as the default 20 s is: when it heals, the failed cluster's nodes are stale,
the fleet the what-if plans on.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from _controller_stack import Stack, qonnect_cmd, wait_for

OPTIONS = ["--agent-interval", "1", "--cluster-grace", "15"]
APPS = {"alpha": {"energy": 1.0}, "beta": {"energy": 1.0}, "gamma": {"performance": 1.0}}
CPU = {"alpha": "1400m", "beta": "1400m", "gamma": "500m"}
TIER = {"gamma": "edge"}  # gamma takes 1 CPU of the edge cluster, the one the others heal to


def spec(name: str, objective: dict[str, float]) -> dict[str, Any]:
    """Two services (web depends on db) of one Deployment each, inline manifests."""

    def service(svc: str, depends: list[str]) -> dict[str, Any]:
        match = {"app": svc}
        container = {
            "name": svc,
            "image": "registry.example/web:1.0",
            "resources": {"requests": {"cpu": CPU[name], "memory": "64Mi"}},
        }
        return {
            "name": svc,
            "tier": TIER.get(name, "any"),
            "dependsOn": depends,
            "manifests": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": svc},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": match},
                        "template": {"metadata": {"labels": match}, "spec": {"containers": [container]}},
                    },
                }
            ],
        }

    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": name},
        "spec": {"objective": objective, "services": [service("db", []), service("web", ["db"])]},
    }


def federation(root: Path, engine: str) -> Stack:
    stack = Stack(root)
    try:
        stack.start_kb()
        stack.start_testbed(3, engine=engine)
        stack.start_agents(1.0)
        for name, objective in APPS.items():
            path = root / f"{name}.yml"
            path.write_text(yaml.safe_dump(spec(name, objective)))
            stack.deploy(path)
        stack.start_replicas(1, OPTIONS)
        leader = stack.wait_leader(timeout=30)
        wait_for(
            lambda: set(APPS) <= set((leader.status() or {}).get("versions", {})),
            30,
            0.2,
            "every application observed by the leader",
        )
    except BaseException:
        stack.close()
        raise
    return stack


def clusters_of(placement: dict[str, Any]) -> dict[str, list[str]]:
    return {svc: sorted({e["cluster"] for e in entries}) for svc, entries in placement.items()}


def what_if(stack: Stack, cluster: str) -> dict[str, Any]:
    """``qonnect plan --fail CLUSTER --json`` against the KB, as a user runs it."""
    res = subprocess.run(
        qonnect_cmd(
            "plan", "--fail", cluster, "--kb", stack.kb_url, "--token-file", str(stack.admin_token), "--json"
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=stack.env,
        check=False,
    )
    assert res.returncode == 0, f"qonnect plan --fail {cluster}: {res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return json.loads(res.stdout)


def whatif_matches_the_heal(stack: Stack) -> dict[str, Any]:
    """Ask, fail, heal, compare. Returns what was compared (for the test's output)."""
    before = {app: clusters_of(stack.placement(app)) for app in APPS}
    hosting: dict[str, set[str]] = {}
    for app, services in before.items():
        for clusters in services.values():
            for c in clusters:
                hosting.setdefault(c, set()).add(app)
    target = min(hosting, key=lambda c: (-len(hosting[c]), c))  # the cluster hosting most
    scenario = what_if(stack, target)
    assert scenario["failed"] == [target] and scenario["survivable"], scenario
    predicted = {
        app: {svc: sorted(m["to"]) for svc, m in outcome["moves"].items()}
        for app, outcome in scenario["applications"].items()
    }
    assert set(predicted) == hosting[target], (predicted, hosting)
    # the test's point: the healed applications compete for the room left (one lands apart)
    assert len({c for svcs in predicted.values() for cs in svcs.values() for c in cs}) >= 2, predicted
    inventory_then = stack.admin.inventory()
    failed_at = time.monotonic()
    stack.testbed("fail", target)
    try:
        for app in sorted(predicted):
            wait_for(
                lambda app=app: stack.healthy_elsewhere(app, {target}), 150, 0.5, f"{app} healed off {target}"
            )
        healed = time.monotonic() - failed_at
        after = {app: clusters_of(stack.placement(app)) for app in APPS}
    finally:
        stack.testbed("recover", target)
    # every application the what-if re-placed is where it said, service by service ...
    differences = {app: (predicted[app], after[app]) for app in predicted if predicted[app] != after[app]}
    assert not differences, explain(differences, inventory_then, stack.admin.inventory())
    # ... and the others were not touched
    for app in set(APPS) - set(predicted):
        assert after[app] == before[app], (app, before[app], after[app])
    return {"failed": target, "predicted": predicted, "healed_after_s": round(healed, 1)}


def explain(differences: dict, then: dict, now: dict) -> str:
    """What differs, and what changed in the fleet between the what-if and the heal (capacity
    or health): the explanation a mismatch needs."""
    changed = []
    before = {c["name"]: c for c in then["clusters"]}
    for c in now["clusters"]:
        old = before.get(c["name"]) or {}
        free_then, free_now = old.get("free") or {}, c.get("free") or {}
        if free_then != free_now or old.get("healthy") != c.get("healthy"):
            changed.append(
                f"{c['name']}: free {free_then} -> {free_now}, healthy {old.get('healthy')} -> {c['healthy']}"
            )
    return (
        "what-if and heal differ (predicted, actual): "
        + json.dumps(differences, sort_keys=True)
        + "\nfleet changes between the what-if and now:\n  "
        + "\n  ".join(changed or ["none"])
    )
