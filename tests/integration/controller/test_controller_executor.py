"""The executor runs a real playbook through ansible-runner: variables, artifacts, secrets, cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _controller_stack import wait_for
from qonnect.controller import proctree
from qonnect.controller.executor import CANCELLED, FAILED, SUCCEEDED, Executor, default_playbook

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
    - name: a slow cluster step in the module (Ansible's worker has called setsid by now)
      ansible.builtin.command:
        argv: ["{{ ansible_playbook_python }}", "-c", "import sys, time; time.sleep(6); open(sys.argv[1], 'w').write('late')", "{{ marker }}"]
      when: marker is defined
"""

SECRET = "s3cr3t-kb-token-value-123456"

DECISION = {
    "id": "d3.7",
    "app": "shop",
    "reason": "cluster edge-1 down",
    "exclude": ["edge-1", "fog-2"],
    "service": None,
}


@pytest.fixture()
def executor(tmp_path: Path) -> Executor:
    playbook = tmp_path / "migrate.yml"
    playbook.write_text(PLAYBOOK)
    token = tmp_path / "token"
    token.write_text(SECRET)
    token.chmod(0o600)
    return Executor(
        str(playbook),
        str(tmp_path / "runs"),
        "http://127.0.0.1:9",
        str(token),
        timeout=60,
        extra={"out": str(tmp_path / "out.json")},
        owner=proctree.new_owner("test"),
    )


def _all_text(path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in path.rglob("*") if p.is_file())


def test_run_passes_decision_and_token_and_keeps_secret_out_of_artifacts(executor: Executor, tmp_path: Path):
    outcome = executor.run(DECISION, 2, {"term": 3, "seq": 9}, lambda: True)
    assert outcome.result == SUCCEEDED and outcome.rc == 0, outcome.detail
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {
        "app": "shop",
        "exclude": ["edge-1", "fog-2"],
        "fencing": {"term": 3, "seq": 9},
        "reason": "cluster edge-1 down",
        "token_len": len(SECRET),
    }
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


def test_cancel_kills_the_whole_process_tree_not_only_the_group(executor: Executor, tmp_path: Path):
    """The module runs under Ansible's worker, which called setsid(): a process-group kill misses it."""
    marker = tmp_path / "late-write"
    executor.extra = dict(executor.extra, marker=str(marker))
    leader = threading.Event()
    leader.set()
    started = tmp_path / "out.json"
    threading.Thread(
        target=lambda: (wait_for(started.exists, 60), time.sleep(1.5), leader.clear()), daemon=True
    ).start()
    outcome = executor.run(DECISION, 1, {"term": 1, "seq": 2}, leader.is_set)
    assert outcome.result == CANCELLED
    assert proctree.marked(executor.owner + "/") == [], "processes of the cancelled run are still alive"
    time.sleep(7)  # the module would have written its marker 6 s after it started
    assert not marker.exists(), "the cancelled run's module kept going and wrote after the cancel"


SIGKILLED_REPLICA = """
import sys, threading
from qonnect.controller import proctree
from qonnect.controller.executor import Executor
owner = proctree.new_owner("victim")
proctree.Watchdog(owner).start()
executor = Executor(sys.argv[1], sys.argv[2], "http://127.0.0.1:9", sys.argv[3], timeout=60,
                    extra={"out": sys.argv[4], "marker": sys.argv[5]}, owner=owner)
print(owner, flush=True)
executor.run({"id": "d1.1", "app": "shop", "reason": "r", "exclude": []}, 1, {"term": 1, "seq": 1},
             lambda: True)
"""


def test_a_sigkilled_replicas_run_dies_with_it(executor: Executor, tmp_path: Path):
    marker, out = tmp_path / "late-write", tmp_path / "out.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SIGKILLED_REPLICA,
            executor.playbook,
            str(tmp_path / "runs2"),
            executor.token_file,
            str(out),
            str(marker),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        owner = proc.stdout.readline().strip()
        wait_for(out.exists, 60, what="the run to start")
        time.sleep(1.5)
        assert proctree.marked(owner + "/"), "the run's processes carry the marker"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: not proctree.marked(owner + "/"), 5, what="the orphaned run to be killed")
        time.sleep(6)
        assert not marker.exists(), "the run of a SIGKILLed replica kept going and wrote"
    finally:
        if proc.poll() is None:
            proc.kill()


BATCH_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: record what the controller passed for the batch
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'apps': batch | map(attribute='app') | list, 'workers': batch_workers} | to_json }}"
"""


@pytest.mark.parametrize(("extra", "workers"), [({}, 3), ({"batch_workers": 2}, 2)])
def test_a_batch_deploys_all_its_applications_at_once_unless_told(
    executor: Executor, tmp_path: Path, extra: dict, workers: int
):
    """Issue 21: the deploy module took a batch of 50 ten at a time (4.4 s; 2.3 s at once);
    --batch-size bounds a batch, and --extra-var batch_workers=N still sets it."""
    playbook = tmp_path / "batch.yml"
    playbook.write_text(BATCH_PLAYBOOK)
    executor.playbook = str(playbook)
    executor.extra = {**(executor.extra or {}), **extra}
    items = [({**DECISION, "id": f"d3.{i}", "app": f"app{i}"}, 1, {"term": 3, "seq": i}) for i in range(3)]
    outcomes = executor.run_batch(items, lambda: True)
    assert set(outcomes) == {"d3.0", "d3.1", "d3.2"}
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen == {"apps": ["app0", "app1", "app2"], "workers": workers}
