"""Issue 25: no credential in anything the controller writes.

A real federation (testbed, KB, agents, one controller replica at ``-v``) heals an application
off a failed cluster, so every path runs: the leader's decisions and probes, a migration through
ansible-runner (job events and artifacts on disk), the KB events it writes and its status
endpoint. Every secret the stack holds - the Raft secret, the admin, controller and agent KB
tokens, each cluster kubeconfig's bearer token or client key - is then searched for in all of
that: 0 hits. The search first checks that the corpus holds the migration it searches, so an
empty output cannot pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _controller_stack import Stack, small_app, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture()
def healed(tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        stack.start_kb()
        stack.start_testbed(3)
        stack.start_agents(1.0)
        spec = tmp_path / "secretive.yml"
        spec.write_text(yaml.safe_dump(small_app("secretive")))
        placed = stack.deploy(spec)
        stack.start_replicas(1, ["--agent-interval", "1", "--cluster-grace", "2"])
        stack.wait_leader(30)
        failed = placed["web"][0]["cluster"]
        stack.testbed("fail", failed)
        wait_for(lambda: stack.healthy_elsewhere("secretive", {failed}), 150, 1.0, "the heal")
        # the migration's run is searched whole: its deploy task (one module run for the batch)
        # reports when every step is done, which may be after the application is Healthy
        wait_for(
            lambda: (
                (leader := stack.leader()) is not None
                and (status := leader.status()) is not None
                and not status.get("running_here")
            ),
            120,
            1.0,
            "the migration run to end",
        )
        yield stack
    finally:
        stack.close()


def secrets(stack: Stack) -> dict[str, str]:
    """Every credential of the stack, by where it came from."""
    found = {"raft secret": stack.secret.read_text().strip()}
    for path in stack.root.glob("*.token"):
        found[path.name] = path.read_text().strip()
    for cluster in stack.federation["clusters"]:
        doc = yaml.safe_load(Path(cluster["kubeconfig"]).read_text())
        for user in doc.get("users") or []:
            for key in ("token", "client-key-data"):
                value = (user.get("user") or {}).get(key)
                if value:
                    found[f"{cluster['name']} kubeconfig {key}"] = str(value)
    return {name: value for name, value in found.items() if len(value) >= 16}


def corpus(stack: Stack) -> dict[str, str]:
    """What the controller wrote: its log, every runner artifact, its KB events, its status."""
    texts = {path.name: path.read_text(errors="replace") for path in stack.root.glob("controller-*.log")}
    for replica in stack.replicas:
        for path in (replica.data_dir / "runs").rglob("*"):
            if path.is_file():
                texts[str(path.relative_to(stack.root))] = path.read_text(errors="replace")
    texts["KB events"] = json.dumps(stack.events())
    leader = stack.leader()
    texts["status"] = json.dumps(leader.status() if leader else {})
    return texts


def test_no_secret_in_the_controllers_logs_artifacts_events_or_status(healed: Stack):
    planted = secrets(healed)
    assert {"raft secret", "admin.token", "controller.token"} <= set(planted), sorted(planted)
    assert any("kubeconfig" in name for name in planted) and any(n.startswith("agent-") for n in planted)
    texts = corpus(healed)
    everything = "\n".join(texts.values())
    # not vacuous: the heal's decision, its runner events and the deploy module's arguments are here
    assert "re-place secretive" in everything and "migrate.yml" in everything
    assert any("job_events" in name for name in texts), sorted(texts)[:20]
    assert "module_args" in everything or "kubeconfig" in everything
    hits = [
        (name, where) for name, value in planted.items() for where, text in texts.items() if value in text
    ]
    assert hits == [], hits
