"""The executor runs a real playbook through ansible-runner: variables, artifacts, secrets, cancel."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from qonnect.rla.executor import CANCELLED, FAILED, SUCCEEDED, Executor, default_playbook

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: record what the controller passed
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'app': app, 'exclude': exclude, 'fencing': fencing, 'reason': reason,
                      'token_len': lookup('ansible.builtin.file', kb_token_file) | length} | to_json }}"
    - name: maybe take a while
      ansible.builtin.pause:
        seconds: "{{ sleep | default(0) | int }}"
    - name: maybe fail
      ansible.builtin.fail:
        msg: "asked to fail"
      when: fail | default(false) | bool
"""

SECRET = "s3cr3t-kb-token-value-123456"

DECISION = {"id": "d3.7", "app": "shop", "reason": "cluster edge-1 down", "exclude": ["edge-1", "fog-2"],
            "service": None}


@pytest.fixture()
def executor(tmp_path: Path) -> Executor:
    playbook = tmp_path / "migrate.yml"
    playbook.write_text(PLAYBOOK)
    token = tmp_path / "token"
    token.write_text(SECRET)
    token.chmod(0o600)
    return Executor(str(playbook), str(tmp_path / "runs"), "http://127.0.0.1:9", str(token), timeout=60,
                    extra={"out": str(tmp_path / "out.json")})


def _all_text(path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in path.rglob("*") if p.is_file())


def test_run_passes_decision_and_token_and_keeps_secret_out_of_artifacts(executor: Executor, tmp_path: Path):
    outcome = executor.run(DECISION, 2, {"term": 3, "seq": 9}, lambda: True)
    assert outcome.result == SUCCEEDED and outcome.rc == 0, outcome.detail
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"app": "shop", "exclude": ["edge-1", "fog-2"], "fencing": {"term": 3, "seq": 9},
                    "reason": "cluster edge-1 down", "token_len": len(SECRET)}
    artifacts = Path(outcome.artifacts)
    assert artifacts.is_dir() and (artifacts / "rc").read_text().strip() == "0"
    assert artifacts.parent.parent.name == "d3.7-a2", "one private data dir per attempt, kept"
    assert SECRET not in _all_text(tmp_path / "runs"), "the KB token leaked into the runner's files"


def test_failure_is_reported_with_the_task_message(executor: Executor):
    executor.extra = dict(executor.extra, fail=True)
    outcome = executor.run(DECISION, 1, {"term": 1, "seq": 2}, lambda: True)
    assert outcome.result == FAILED and "asked to fail" in outcome.detail and outcome.rc != 0


def test_run_is_cancelled_when_leadership_is_lost(executor: Executor):
    executor.extra = dict(executor.extra, sleep=30)
    leader = threading.Event()
    leader.set()
    threading.Timer(3.0, leader.clear).start()
    t0 = time.monotonic()
    outcome = executor.run(DECISION, 1, {"term": 1, "seq": 2}, leader.is_set)
    assert outcome.result == CANCELLED and time.monotonic() - t0 < 15


def test_default_playbook_is_the_collections_migrate():
    path = default_playbook()
    assert path.endswith("playbooks/migrate.yml") and Path(path).is_file()
