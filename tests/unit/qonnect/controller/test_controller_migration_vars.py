"""The controller's planning settings cross from Python to the migration playbook once, and the
playbook hands them to the deploy module: a migration re-plans the way drift was judged."""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml
from qonnect.controller.detector import Settings
from qonnect.controller.loop import Config, migration_vars

REPO = Path(__file__).resolve().parents[4]


def config(**kw) -> Config:
    return Config("127.0.0.1:1", [], "http://kb", "t", "/t", "s" * 32, "/d", "migrate.yml", **kw)


def test_the_detectors_hysteresis_reaches_every_run_and_no_scorer_is_forced():
    got = migration_vars(config(settings=Settings(hysteresis=0.35)))
    # the scorer is the user's stored one (in the committed plan, or the run's own vars): a
    # default here would override it for every application of a batch (issue 21)
    assert got["hysteresis"] == 0.35 and "scorer" not in got
    assert migration_vars(config(extravars={"kb_ca_path": "/ca.pem"}))["kb_ca_path"] == "/ca.pem"


def test_each_run_waits_as_long_as_the_controller_says_and_may_take_longer_than_that():
    from qonnect.controller.timeouts import DEFAULT_WAIT_TIMEOUT, run_timeout_for

    assert migration_vars(config())["wait_timeout"] == DEFAULT_WAIT_TIMEOUT == 300
    assert migration_vars(config(wait_timeout=42.0))["wait_timeout"] == 42.0
    assert config().run_timeout == run_timeout_for(DEFAULT_WAIT_TIMEOUT) > DEFAULT_WAIT_TIMEOUT
    # the operator's extra vars never override what the controller judged and timed with
    got = migration_vars(config(extravars={"wait_timeout": "1", "hysteresis": "0.9"}))
    assert got["wait_timeout"] == DEFAULT_WAIT_TIMEOUT and got["hysteresis"] == 0.1


def test_the_deploy_defaults_are_sized_for_real_pulls_everywhere():
    """Module option, its docs, both playbooks and the controller share one default."""
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import DEFAULT_WAIT_TIMEOUT
    from ansible_collections.qonnect.core.plugins.modules import deploy

    doc = yaml.safe_load(deploy.DOCUMENTATION)["options"]["wait_timeout"]
    assert doc["default"] == DEFAULT_WAIT_TIMEOUT == 300
    for name in ("deploy.yml", "migrate.yml"):
        text = (REPO / "playbooks" / name).read_text()
        assert "wait_timeout | default(300)" in text, name
    role = yaml.safe_load((REPO / "roles" / "controller" / "defaults" / "main.yml").read_text())
    assert role["controller_wait_timeout"] == DEFAULT_WAIT_TIMEOUT


def test_the_migration_playbook_hands_them_to_deploy():
    play = yaml.safe_load((REPO / "playbooks" / "migrate.yml").read_text())[0]
    deploy = next(t["qonnect.core.deploy"] for t in play["tasks"] if "qonnect.core.deploy" in t)
    assert "hysteresis" in deploy["hysteresis"] and "scorer" in deploy["scorer"]
    assert "wait_timeout" in deploy["wait_timeout"]
    used = (REPO / "playbooks" / "migrate.yml").read_text()
    assert "service" not in migration_vars(config()) and "{{ service" not in used


def _run(capsys, tmp_path, *args: str) -> str:
    from qonnect import cli

    token = tmp_path / "kb.token"
    token.write_text("t")
    secret = tmp_path / "raft.secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    argv = ["controller", "run", "--id", "c1", "--self", "127.0.0.1:1", "--peers", "127.0.0.1:2"]
    argv += ["--kb", "http://127.0.0.1:9", "--token-file", str(token), "--raft-secret-file", str(secret)]
    assert cli.main([*argv, *args]) == 2
    return capsys.readouterr().err


def test_the_controller_refuses_extra_vars_it_sets_itself_and_bad_waits(capsys, tmp_path):
    err = _run(capsys, tmp_path, "--extra-var", "wait_timeout=5")
    assert "--extra-var: wait_timeout is set by the controller itself (use --wait-timeout)" in err
    err = _run(capsys, tmp_path, "--wait-timeout", "0")
    assert "--wait-timeout" in err and "Traceback" not in err
