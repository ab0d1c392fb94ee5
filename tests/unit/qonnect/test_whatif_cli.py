"""Issue 37: ``qonnect plan --fail`` and ``qonnect survivability`` on the paper's nine clusters
with Bookinfo, read from an inventory file and --spec files (the KB path: test_whatif_kb.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from qonnect.cli import main

ROOT = Path(__file__).resolve().parents[3]
BOOKINFO = ROOT / "examples" / "bookinfo"
ENERGY = str(BOOKINFO / "energy-first.yml")
COST = str(BOOKINFO / "cost-first.yml")
INV = str(ROOT / "examples" / "inventories" / "paper.json")
PAPER = json.loads(Path(INV).read_text())
FLEET = ["--spec", ENERGY, "--inventory", INV]
HOME = {"productpage": "cloud-1", "details": "fog-1", "reviews": "fog-1", "ratings": "edge-1"}


def reviews_at_peak(folder: Path, survive: list | None = None) -> str:
    """Bookinfo energy-first with reviews at six replicas of 2 CPU / 2Gi: the fog tier holds
    them only with fog-3 (its largest cluster) up."""
    spec = yaml.safe_load(Path(ENERGY).read_text())
    for svc in spec["spec"]["services"]:
        svc["manifests"] = [{"file": str(BOOKINFO / m["file"])} for m in svc["manifests"]]
        if svc["name"] == "reviews":
            svc.update(replicas=6, spread=2, manifests=[deployment("reviews", "2", "2Gi")])
    if survive is not None:
        spec["spec"]["survive"] = survive
    path = folder / "peak.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def deployment(name: str, cpu: str, memory: str) -> dict:
    pod = {
        "containers": [
            {"name": name, "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def pinned(folder: Path, name: str, selector: dict, survive: list | None = None) -> str:
    """A one-service application pinned by clusterSelector."""
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "services": [
                {
                    "name": "web",
                    "tier": "any",
                    "constraints": {"clusterSelector": {"matchLabels": selector}},
                    "manifests": [deployment("web", "250m", "128Mi")],
                }
            ]
        },
    }
    if survive is not None:
        spec["spec"]["survive"] = survive
    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def sited(folder: Path) -> str:
    """The paper fleet with a ``site`` label: west holds the *-1 and *-2 clusters, east the *-3."""
    inv = copy.deepcopy(PAPER)
    for c in inv["clusters"]:
        c["labels"]["site"] = "east" if c["name"].endswith("-3") else "west"
    path = folder / "sited.json"
    path.write_text(json.dumps(inv))
    return str(path)


# -- qonnect plan --fail ------------------------------------------------------------------------


def test_plan_fail_text_shows_moves_objectives_and_spare(capsys):
    assert main(["plan", "--fail", "fog-1", *FLEET]) == 0
    out = capsys.readouterr().out
    assert out.startswith("What if fog-1 failed now: the heal the controller would plan")
    # the spec is not placed in paper.json: it is placed first, where `qonnect plan` puts it
    assert "bookinfo: not placed in the inventory; placed first as a deploy would now" in out
    assert "bookinfo: re-placed, objective 0.8270 -> " in out
    assert "  productpage  cloud-1 (unchanged)" in out
    assert "  details      fog-1 -> fog-2" in out
    assert "  reviews      fog-1 -> fog-2" in out
    assert "  ratings      edge-1 (unchanged)" in out
    assert "Spare capacity after the heal (clusters still up):" in out
    assert "  fog    15.15 CPU  17Gi" in out
    assert "Survivable: every application on fog-1 is re-placed." in out


def test_plan_fail_json_is_the_scenario(capsys):
    assert main(["plan", "--fail", "fog-1", *FLEET, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"] == "cluster fog-1" and doc["failed"] == ["fog-1"] and doc["survivable"] is True
    moves = doc["applications"]["bookinfo"]["moves"]
    assert {svc: m["from"] for svc, m in moves.items()} == {svc: [c] for svc, c in HOME.items()}
    assert moves["details"]["to"] == ["fog-2"] and moves["productpage"]["to"] == ["cloud-1"]
    assert doc["applications"]["bookinfo"]["objective_before"] == pytest.approx(0.827)
    assert doc["spare"]["fog"]["cpu_text"] == "15.15 CPU"
    assert doc["first_shortfall"] is None


def test_plan_fail_explains_each_service_as_plan_does(capsys):
    """The issue: each scenario's plan is explained as well as `qonnect plan` explains one -
    every cluster considered per service, with its criteria or why it was rejected."""
    assert main(["plan", "--fail", "fog-1", *FLEET]) == 0
    text = capsys.readouterr().out
    assert "  details:" in text and "* fog-2" in text, text
    assert "fog-1                -  rejected: cluster is not healthy" in text, text
    assert "edge-1               -  rejected: tier is edge, the service needs fog" in text, text
    assert main(["plan", "--fail", "fog-1", *FLEET, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["applications"]["bookinfo"]["explanation"]["details"]
    by_cluster = {r["cluster"]: r for r in rows}
    assert by_cluster["fog-1"]["eligible"] is False and by_cluster["fog-2"]["eligible"] is True
    assert set(by_cluster["fog-2"]["criteria"]) >= {"energy", "cost", "performance"}


def test_plan_fail_takes_lists_labels_and_the_policy_of_the_specs(capsys):
    # cloud-1 and fog-1 by name, the edge tier by label: ratings has nowhere to go
    args = ["plan", "--fail", "cloud-1,fog-1", "--fail-label", "tier=edge", *FLEET, "--json"]
    assert main(args) == 0  # a plan, not a gate: survivability's exit code gates
    doc = json.loads(capsys.readouterr().out)
    assert doc["failed"] == ["cloud-1", "edge-1", "edge-2", "edge-3", "fog-1"]
    assert doc["scenario"] == "cluster cloud-1, fog-1 + tier=edge"
    assert doc["survivable"] is False and doc["applications"]["bookinfo"]["placed"] is False
    assert doc["first_shortfall"]["service"] == "ratings"
    # --exclude is the spec's stored policy: the heal avoids fog-2 as a deploy would
    assert main(["plan", "--fail", "fog-1", *FLEET, "--exclude", "fog-2", "--json"]) == 0
    moves = json.loads(capsys.readouterr().out)["applications"]["bookinfo"]["moves"]
    assert moves["details"]["to"] == ["fog-3"]


def test_plan_fail_shows_what_cannot_be_placed_with_the_shortfall(tmp_path, capsys):
    spec = reviews_at_peak(tmp_path)
    assert main(["plan", "--fail", "fog-3", "--spec", spec, "--inventory", INV]) == 0
    out = capsys.readouterr().out
    assert "bookinfo: CANNOT be re-placed, objective " in out and " -> -" in out
    assert "  reviews      fog-1, fog-2, fog-3 -> (not planned)" in out
    assert "why: reviews: no eligible cluster (capacity for 6 replicas" in out
    assert "missing: reviews: 4 CPU of cpu missing (room for 4 of 6 replicas)" in out
    assert "NOT survivable: bookinfo cannot be re-placed." in out
    assert main(["plan", "--fail", "fog-3", "--spec", spec, "--inventory", INV, "--json"]) == 0
    short = json.loads(capsys.readouterr().out)["applications"]["bookinfo"]["shortfall"]
    assert short["resource"] == "cpu" and short["missing_text"] == "4 CPU" and short["room_for"] == 4


def test_plan_fail_on_a_cluster_nothing_runs_on(capsys):
    assert main(["plan", "--fail", "cloud-3", *FLEET]) == 0
    out = capsys.readouterr().out
    assert "No application has a replica on cloud-3: nothing to re-place." in out
    assert "Survivable: nothing runs there." in out


def test_every_unknown_cluster_and_label_is_named_at_once(capsys):
    args = ["plan", "--fail", "edge-11,fog-1", "--fail", "nowhere", "--fail-label", "site=west"]
    args += ["--fail-label", "region=us", "--fail-label", "bad", *FLEET]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "qonnect plan: error: cannot simulate these failures:" in err
    assert "--fail: 'edge-11' is not a known cluster (did you mean edge-1?)" in err
    assert "--fail: 'nowhere' is not a known cluster" in err
    assert "--fail-label: no cluster has site=west (no cluster has the label 'site')" in err
    assert "--fail-label: no cluster has region=us (values in the fleet: eu)" in err
    assert "--fail-label: 'bad' is not KEY=VALUE" in err
    assert "known clusters: cloud-1, cloud-2" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--fail", "fog-1", "--inventory", INV],
            "--inventory FILE needs the applications: one --spec FILE each",
        ),
        (["--fail", ",", *FLEET], "--fail: name at least one cluster or label to fail"),
        (["--fail", "fog-1", *FLEET, "--exclude", "fog-22"], "'fog-22' is not a known cluster"),
        (["--fail", "fog-1", *FLEET, "--spec", COST], "application 'bookinfo' is also the one of"),
        (["--spec", ENERGY, "--spec", COST, "--inventory", INV], "--spec given 2 times"),
        (["--inventory", INV], "expected --spec FILE (the application to plan), or --fail CLUSTER"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(monkeypatch, capsys, args, message):
    monkeypatch.delenv("QONNECT_KB_URL", raising=False)
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_spec_that_cannot_be_placed_at_all_is_a_usage_error(tmp_path, capsys):
    spec = pinned(tmp_path, "lost", {"region": "us"})
    assert main(["plan", "--fail", "fog-1", "--spec", spec, "--inventory", INV]) == 2
    err = capsys.readouterr().err
    assert "cannot be placed now, so no failure of theirs can be simulated" in err
    assert "lost: service 'web' cannot be placed" in err


def test_plan_without_fail_is_unchanged(capsys):
    assert main(["plan", *FLEET]) == 0
    assert capsys.readouterr().out.startswith("Plan for bookinfo (scorer weighted, objective 0.8270)")


# -- qonnect survivability ----------------------------------------------------------------------


def test_bookinfo_survives_every_single_cluster_failure(capsys):
    assert main(["survivability", *FLEET]) == 0
    out = capsys.readouterr().out
    assert out.startswith("N-1 survivability of 1 application on 9 clusters: survivable")
    assert " s)" in out.splitlines()[1] and "9 scenarios" in out.splitlines()[1]
    for cluster in HOME.values():
        assert f"cluster {cluster}" in out
    assert "No application on: cluster cloud-2, cluster cloud-3, cluster edge-2" in out
    assert "Spare capacity per tier (clusters up):" in out
    assert "  fog    20.9 CPU, 23.4Gi" in out
    assert "  bookinfo     any one cluster  survives" in out


def test_survivability_json_is_the_report(capsys):
    assert main(["survivability", *FLEET, "--json", "--label", "tier"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["survivable"] is True
    names = [s["scenario"] for s in doc["scenarios"]]
    assert names[:9] == sorted(f"cluster {c['name']}" for c in PAPER["clusters"])
    assert names[9:] == ["tier=cloud", "tier=edge", "tier=fog"]
    # losing a whole tier is not survivable, but bookinfo states only any one cluster's failure
    assert not any(s["survivable"] for s in doc["scenarios"][9:])
    assert doc["applications"]["bookinfo"] == {"must_survive": [{"cluster": "any"}], "violations": []}
    assert doc["evaluated"] >= 3 and doc["seconds"] >= 0


def test_not_survivable_exits_1_and_names_the_failure_and_the_shortfall(tmp_path, capsys):
    spec = reviews_at_peak(tmp_path)
    assert main(["survivability", "--spec", spec, "--inventory", INV]) == 1
    out = capsys.readouterr().out
    assert out.startswith("N-1 survivability of 1 application on 9 clusters: NOT survivable")
    row = next(line for line in out.splitlines() if line.startswith("cluster fog-3"))
    assert row.split()[3] == "NO" and row.endswith("reviews: 4 CPU of cpu missing (room for 4 of 6 replicas)")
    assert "does NOT survive cluster fog-3: reviews: no eligible cluster" in out
    assert main(["survivability", "--spec", spec, "--inventory", INV, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["survivable"] is False
    assert [v["scenario"] for v in doc["applications"]["bookinfo"]["violations"]] == ["cluster fog-3"]


def test_a_service_pinned_to_one_cluster_does_not_survive_its_loss(tmp_path, capsys):
    web = pinned(tmp_path, "web", {"qonnect.io/profile": "energy", "qonnect.io/tier": "fog"})
    assert main(["survivability", "--spec", ENERGY, "--spec", web, "--inventory", INV, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["applications"]["bookinfo"]["violations"] == []
    (violation,) = doc["applications"]["web"]["violations"]
    assert violation["scenario"] == "cluster fog-1" and "web: no eligible cluster" in violation["reason"]


def test_each_application_is_held_to_its_own_statement(tmp_path, capsys):
    """spec.survive with {label: site}: every site's failure is evaluated (without --label) and
    counts against the applications that state it, not against the others."""
    inv = sited(tmp_path)
    west = pinned(tmp_path, "west", {"site": "west"}, survive=[{"cluster": "any"}, {"label": "site"}])
    relaxed = pinned(tmp_path, "relaxed", {"site": "west"}, survive=[])  # states nothing to survive
    args = ["survivability", "--spec", ENERGY, "--spec", west, "--spec", relaxed, "--inventory", inv]
    assert main([*args, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    scenarios = {s["scenario"]: s for s in doc["scenarios"]}
    assert scenarios["site=east"]["survivable"] is True
    assert scenarios["site=west"]["survivable"] is False
    assert doc["applications"]["west"]["must_survive"] == [{"cluster": "any"}, {"label": "site"}]
    assert [v["scenario"] for v in doc["applications"]["west"]["violations"]] == ["site=west"]
    assert doc["applications"]["relaxed"] == {"must_survive": [], "violations": []}
    assert doc["applications"]["bookinfo"]["violations"] == []  # states no site failure
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "  west         any one cluster, each site  does NOT survive site=west:" in out
    assert "  relaxed      nothing" in out


def test_survivability_usage_errors_exit_2(monkeypatch, capsys):
    monkeypatch.delenv("QONNECT_KB_URL", raising=False)
    assert main(["survivability", "--inventory", INV]) == 2
    assert "--inventory FILE needs the applications" in capsys.readouterr().err
    assert main(["survivability"]) == 2
    assert "expected --inventory FILE (with --spec files) or --kb URL" in capsys.readouterr().err
    assert main(["survivability", *FLEET, "--label", "site"]) == 0  # no such label: noted, not an error
    assert "--label site: no cluster has this label" in capsys.readouterr().out


# -- docs/whatif.md -------------------------------------------------------------------------------


def test_the_worked_example_of_the_docs_holds(tmp_path, capsys, monkeypatch):
    """docs/whatif.md: its bookinfo-peak.yml, run beside examples/, does not survive fog-3's
    failure for the reason the page gives, and the page shows that row."""
    doc = (ROOT / "docs" / "whatif.md").read_text()
    peak = doc.split("```yaml\napiVersion: qonnect.io/v1", 1)[1].split("```", 1)[0]
    (tmp_path / "bookinfo-peak.yml").write_text("apiVersion: qonnect.io/v1" + peak)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    args = ["survivability", "--spec", "bookinfo-peak.yml", "--inventory", "examples/inventories/paper.json"]
    assert main(args) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("cluster fog-3"))
    assert row in doc
    assert "reviews: 4 CPU of cpu missing (room for 4 of 6 replicas)" in row
    for line in out.splitlines()[2:]:  # all but the header's timing
        assert line in doc, line
