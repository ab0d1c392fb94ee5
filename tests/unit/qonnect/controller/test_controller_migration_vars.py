"""The controller's planning settings cross from Python to the migration playbook once, and the
playbook hands them to the deploy module: a migration re-plans the way drift was judged."""

from __future__ import annotations

from pathlib import Path

import yaml
from qonnect.controller.detector import Settings
from qonnect.controller.loop import Config, migration_vars

REPO = Path(__file__).resolve().parents[4]


def config(**kw) -> Config:
    return Config("127.0.0.1:1", [], "http://kb", "t", "/t", "s" * 32, "/d", "migrate.yml", **kw)


def test_the_detectors_hysteresis_and_the_scorer_reach_every_run():
    got = migration_vars(config(settings=Settings(hysteresis=0.35)))
    assert got["hysteresis"] == 0.35 and got["scorer"] == "weighted"
    assert migration_vars(config(extravars={"kb_ca_path": "/ca.pem"}))["kb_ca_path"] == "/ca.pem"


def test_the_migration_playbook_hands_them_to_deploy():
    play = yaml.safe_load((REPO / "playbooks" / "migrate.yml").read_text())[0]
    deploy = next(t["qonnect.core.deploy"] for t in play["tasks"] if "qonnect.core.deploy" in t)
    assert "hysteresis" in deploy["hysteresis"] and "scorer" in deploy["scorer"]
    used = (REPO / "playbooks" / "migrate.yml").read_text()
    assert "service" not in migration_vars(config()) and "{{ service" not in used
