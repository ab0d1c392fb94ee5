"""``qonnect plan``: readable and JSON output, clear errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from qonnect.cli import main

ROOT = Path(__file__).resolve().parents[3]
SPEC = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")
INV = str(ROOT / "examples" / "inventories" / "paper.json")


def test_readable_plan_with_explanation(capsys):
    assert main(["plan", "--spec", SPEC, "--inventory", INV]) == 0
    out = capsys.readouterr().out
    assert "Plan for bookinfo (scorer weighted" in out
    assert "productpage  -> cloud-1 x1 (cloud-1-worker)" in out
    assert "rejected: tier is cloud, the service needs fog" in out
    assert "* fog-1" in out


def test_json_plan_with_scorer_and_exclude(capsys):
    args = ["plan", "--spec", SPEC, "--inventory", INV, "--json", "--scorer", "borda", "--exclude", "cloud-1"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["scorer"] == "borda"
    assert plan["services"]["productpage"][0]["cluster"] == "cloud-2"


def test_invalid_spec_lists_every_error(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "apiVersion: qonnect.io/v1\nkind: Application\nmetadata: {name: x}\n"
        "spec:\n  objective: {energy: 2}\n  services:\n    - name: s\n"
        "      tier: cloude\n      manifests: [{file: none.yaml}]\n"
    )
    assert main(["plan", "--spec", str(bad), "--inventory", INV]) == 2
    err = capsys.readouterr().err
    assert "spec.services[0].tier: 'cloude' is not one of cloud, fog, edge, any" in err
    assert "spec.objective.energy: 2 is not a number between 0 and 1" in err
    assert "Traceback" not in err


def test_inventory_and_placement_errors(tmp_path, capsys, monkeypatch):
    broken = tmp_path / "inv.json"
    broken.write_text('{"clusters": [')
    assert main(["plan", "--spec", SPEC, "--inventory", str(broken)]) == 2
    assert f"{broken}:" in capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                "--spec",
                SPEC,
                "--inventory",
                INV,
                "--exclude",
                "edge-1",
                "--exclude",
                "edge-2",
                "--exclude",
                "edge-3",
            ]
        )
        == 2
    )
    assert (
        "service 'ratings' cannot be placed: no cluster meets the exclusion list" in capsys.readouterr().err
    )
    monkeypatch.delenv("QONNECT_KB_TOKEN", raising=False)
    monkeypatch.delenv("QONNECT_KB_URL", raising=False)
    assert main(["plan", "--spec", SPEC, "--kb", "http://127.0.0.1:9"]) == 2
    assert "--token-file: expected a file holding a KB token (or set QONNECT_KB_TOKEN)" in (
        capsys.readouterr().err
    )
    assert main(["plan", "--spec", SPEC]) == 2
    assert "expected --inventory FILE or --kb URL (or set QONNECT_KB_URL)" in capsys.readouterr().err


def test_the_plan_says_how_close_each_latency_bound_is(tmp_path, capsys):
    """Issue 22.6: a bound near the measured latency is visible before the deploy."""
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": "near"},
        "spec": {
            "services": [
                {
                    "name": "web",
                    "tier": "fog",
                    "constraints": {"maxLatency": {"from": "edge-3", "ms": 8}},
                    "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}],
                }
            ]
        },
    }
    path = tmp_path / "near.json"
    path.write_text(json.dumps(spec))
    assert main(["plan", "--spec", str(path), "--inventory", INV]) == 0
    assert "web     fog-3 is 7 ms from edge-3: 88% of maxLatency 8 ms" in capsys.readouterr().out
    assert main(["plan", "--spec", str(path), "--inventory", INV, "--json"]) == 0
    bounds = json.loads(capsys.readouterr().out)["bounds"]
    assert bounds == {"web": [{"cluster": "fog-3", "from": "edge-3", "ms": 7.0, "bound": 8, "limit": 8.0}]}
