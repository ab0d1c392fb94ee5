"""The controller watches N-1 survivability (issue 37), on real processes: testbed (emulated
clusters) + KB + agents + a controller replica, deploys through playbooks/deploy.yml.

Two applications may each run only on the same two clusters (their stored exclusions), and each
needs more than half of either cluster's CPU. One of them alone survives the loss of its cluster;
with both at full size, neither would be re-placed if the other's cluster failed:

- a deploy of the bigger version with ``require_survivable`` is refused before anything changes
  (the KB's spec version, placement, events and what runs on the clusters stay as they were);
- the same deploy without it goes through, and the leader says so: one
  ``controller.survivability.lost`` event per application naming the scenario and the shortfall,
  a fleet verdict event, and the survivability section of its ``/status`` and ``qonnect status``.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _controller_stack import BIN, REPO, Stack, qonnect_cmd, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

# a high hysteresis: no QoS-drift move of the applications while the test looks at them
OPTIONS = ["--agent-interval", "1", "--survivability-every", "1", "--hysteresis", "0.9"]
LOST = "controller.survivability.lost"
FLEET = "controller.survivability.fleet"


@pytest.fixture()
def fleet(tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        stack.start_kb()
        stack.start_testbed(6)
        stack.start_agents(1.0)
        yield stack
    finally:
        stack.close()


def big_app(name: str, cpu: float, revision: str) -> dict[str, Any]:
    """One service, one Deployment of one replica requesting ``cpu`` cores."""
    container = {
        "name": "web",
        "image": "nginx",
        "env": [{"name": "REVISION", "value": revision}],
        "resources": {"requests": {"cpu": f"{int(cpu * 1000)}m", "memory": "16Mi"}},
    }
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "services": [
                {
                    "name": "web",
                    "manifests": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "metadata": {"name": "web"},
                            "spec": {
                                "selector": {"matchLabels": {"app": "web"}},
                                "template": {
                                    "metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [container]},
                                },
                            },
                        }
                    ],
                }
            ]
        },
    }


def deploy(stack: Stack, body: dict[str, Any], **extra: Any) -> subprocess.CompletedProcess:
    """playbooks/deploy.yml with the admin token and ``extra`` variables; the finished process."""
    name = body["metadata"]["name"]
    path = (
        stack.root
        / f"{name}-{body['spec']['services'][0]['manifests'][0]['spec']['template']['spec']['containers'][0]['env'][0]['value']}.yml"
    )
    path.write_text(yaml.safe_dump(body))
    variables = stack.root / f"{path.stem}.vars.json"
    variables.write_text(
        json.dumps(
            {
                "app_file": str(path),
                "kb_url": stack.kb_url,
                "kb_token_file": str(stack.admin_token),
                "wait_timeout": 60,
                **extra,
            }
        )
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "deploy.yml"), "-e", f"@{variables}"],
        capture_output=True,
        text=True,
        timeout=240,
        env=stack.env,
        cwd=stack.root,
        check=False,
    )


def ok(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, f"deploy failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}"


def pair(stack: Stack) -> tuple[list[str], float]:
    """Two clusters of the same free CPU and a request that fits one of them but not two."""
    free = {}
    for c in stack.admin.inventory()["clusters"]:
        free[c["name"]] = sum(
            n["allocatable"]["cpu"] - n["requested"]["cpu"] for n in c["nodes"] if n.get("ready")
        )
    names = sorted(free, key=lambda n: (free[n], n))
    a, b = min(itertools.pairwise(names), key=lambda p: abs(free[p[0]] - free[p[1]]))
    low, high = min(free[a], free[b]), max(free[a], free[b])
    cpu = round(high / 2 + 0.3, 1)
    assert cpu <= low - 0.3, f"no two clusters alike enough: {free}"
    return [a, b], cpu


def healthy(stack: Stack, cluster: str) -> bool:
    return any(c["name"] == cluster and c["healthy"] for c in stack.admin.inventory()["clusters"])


def version_of(stack: Stack, app: str) -> int:
    return int(stack.admin.request("GET", f"/api/v1/applications/{app}")["version"])


def survivability(stack: Stack) -> dict[str, Any]:
    return (stack.replicas[0].status() or {}).get("survivability") or {}


def test_a_deploy_that_breaks_n_minus_1_is_refused_or_reported(fleet: Stack):
    stack = fleet
    (c1, c2), cpu = pair(stack)
    others = sorted(c["name"] for c in stack.federation["clusters"] if c["name"] not in (c1, c2))
    ok(deploy(stack, big_app("alpha", cpu, "1"), exclude=others))
    (home,) = {t["cluster"] for t in stack.placement("alpha")["web"]}
    # beta's small first version on the other cluster, with the same policy: deployed while
    # alpha's cluster is down (a planner counts a running application's replicas at its new
    # version's requests, so the bigger version must not start beside alpha)
    stack.testbed("fail", home)
    wait_for(lambda: not healthy(stack, home), 30, 0.5, f"{home} reported down")
    ok(deploy(stack, big_app("beta", 0.1, "1"), exclude=others))
    stack.testbed("recover", home)
    wait_for(lambda: healthy(stack, home), 30, 0.5, f"{home} reported back")
    assert {t["cluster"] for t in stack.placement("beta")["web"]} == {c1, c2} - {home}
    stack.start_replicas(1, OPTIONS)
    stack.wait_leader(30)

    def verdict(survivable: bool) -> dict[str, Any] | None:
        doc = survivability(stack)
        apps = doc.get("applications") or {}
        return (
            doc
            if doc.get("state") == "computed" and doc["survivable"] is survivable and len(apps) == 2
            else None
        )

    doc = wait_for(lambda: verdict(True), 60, 0.5, "the leader's first survivability report")
    assert doc["scenarios"] >= 6 and doc["seconds"] >= 0, doc
    wait_for(lambda: [e for e in stack.events() if e["type"] == FLEET], 20, 0.5, "the first fleet verdict")

    # -- refused: nothing changes anywhere -----------------------------------------------------
    before = {
        "version": version_of(stack, "beta"),
        "placement": stack.admin.get_placement("beta"),
        "events": [e["id"] for e in stack.events("beta")],
        "workloads": sorted(
            (w["cluster"], w["name"], w.get("replicas"))
            for w in stack.admin.list_workloads(application="beta")
        ),
    }
    refused = deploy(stack, big_app("beta", cpu, "2"), exclude=others, require_survivable=True)
    assert refused.returncode != 0, refused.stdout[-3000:]
    out = refused.stdout
    assert "refused by require_survivable" in out, out[-3000:]
    assert f"alpha: if cluster {home} fails: web: " in out and "CPU of cpu missing" in out, out[-3000:]
    assert "beta: if cluster " in out, out[-3000:]
    time.sleep(3)  # agents report twice: anything applied would show
    assert version_of(stack, "beta") == before["version"]
    assert stack.admin.get_placement("beta") == before["placement"]
    assert [e["id"] for e in stack.events("beta")] == before["events"]
    assert (
        sorted(
            (w["cluster"], w["name"], w.get("replicas"))
            for w in stack.admin.list_workloads(application="beta")
        )
        == before["workloads"]
    )
    assert not [e for e in stack.events() if e["type"] == LOST]

    # -- the same deploy without the check: the leader reports it, once per application --------
    ok(deploy(stack, big_app("beta", cpu, "2"), exclude=others))
    assert version_of(stack, "beta") == before["version"] + 1

    def lost() -> list[dict[str, Any]] | None:
        found = [e for e in stack.events() if e["type"] == LOST]
        return found if {e["application"] for e in found} == {"alpha", "beta"} else None

    events = wait_for(lost, 60, 0.5, "a survivability.lost event for each application")
    alpha = next(e for e in events if e["application"] == "alpha")
    assert alpha["role"] == "controller" and alpha["fencing"], alpha
    assert "cluster " in alpha["message"] and "CPU of cpu missing" in alpha["message"], alpha["message"]
    assert alpha["data"]["violations"][0]["scenario"] in (f"cluster {c1}", f"cluster {c2}"), alpha
    doc = wait_for(lambda: verdict(False), 30, 0.5, "the leader's status: not survivable")
    assert doc["not_survivable"] == ["alpha", "beta"], doc
    assert doc["first_shortfall"]["text"], doc
    fleet_events = [e for e in stack.events() if e["type"] == FLEET]
    assert fleet_events[-1]["data"]["survivable"] is False, fleet_events[-1]
    assert set(fleet_events[-1]["data"]["not_survivable"]) == {"alpha", "beta"}

    # qonnect status shows it (the leader's live report), as text and as JSON
    base = ["status", "--kb", stack.kb_url, "--token-file", str(stack.admin_token)]
    base += ["--controller", stack.replicas[0].http]
    shown = subprocess.run(
        qonnect_cmd(*base), capture_output=True, text=True, timeout=60, env=stack.env, check=True
    ).stdout
    assert "survivability (N-1): NO" in shown and "alpha: not if cluster " in shown, shown
    as_json = json.loads(
        subprocess.run(
            qonnect_cmd(*base, "--json"),
            capture_output=True,
            text=True,
            timeout=60,
            env=stack.env,
            check=True,
        ).stdout
    )
    assert as_json["survivability"]["survivable"] is False
    assert as_json["survivability"]["applications"]["beta"]["survivable"] is False
    assert "leader" in as_json["controller"] and "replicas" in as_json["controller"]  # as before
    # ... and without a controller: the verdict the KB recorded
    recorded = json.loads(
        subprocess.run(
            qonnect_cmd(*base[:5], "--json"),
            capture_output=True,
            text=True,
            timeout=60,
            env=stack.env,
            check=True,
        ).stdout
    )["survivability"]
    assert recorded["source"] == "kb" and recorded["not_survivable"] == ["alpha", "beta"], recorded

    # once per transition: later recomputations announce nothing again
    time.sleep(4)
    assert len([e for e in stack.events() if e["type"] == LOST]) == 2
    log = stack.replicas[0].log()
    assert "survivability: NOT survivable" in log and " ms " in log, log[-3000:]
