"""Migrations run below the replica's CPU priority, so a host they saturate keeps its leader.

Real migration runs (the controller's Executor, ansible-runner, ansible-playbook, a module
that keeps every core busy, as migrations did in issue 21) run beside three real RaftNode
replicas (``_raft_replica.py``) that commit commands back to back. The runs' processes carry
the lowered priority; no replica sees a new term while they run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _raft_cluster import Cluster
from qonnect.controller import proctree
from qonnect.controller.executor import SUCCEEDED, Executor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BUSY_SECONDS = 15
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: migration-like work on every core, recording the priority it ran at
      ansible.builtin.command:
        argv:
          - "{{ ansible_playbook_python }}"
          - "-c"
          - |
            import os, sys, time
            open(sys.argv[1], "w").write(str(os.getpriority(os.PRIO_PROCESS, 0)))
            end = time.monotonic() + float(sys.argv[3])
            for _ in range(int(sys.argv[2]) - 1):
                if os.fork() == 0:
                    break
            while time.monotonic() < end:
                pass
          - "{{ out }}"
          - "{{ procs }}"
          - "{{ seconds }}"
"""


def _executor(tmp_path: Path, index: int, procs: int) -> Executor:
    playbook = tmp_path / "busy.yml"
    playbook.write_text(PLAYBOOK)
    token = tmp_path / "token"
    token.write_text("unused-kb-token")
    token.chmod(0o600)
    return Executor(
        str(playbook),
        str(tmp_path / f"runs-{index}"),
        "http://127.0.0.1:9",
        str(token),
        timeout=120,
        extra={"out": str(tmp_path / f"nice-{index}"), "procs": procs, "seconds": BUSY_SECONDS},
        owner=proctree.new_owner(f"isolation-{index}"),
    )


def _decision(index: int) -> dict[str, Any]:
    return {"id": f"d{index}", "app": f"app{index}", "reason": "load", "exclude": [], "service": None}


def test_migrations_run_niced_and_a_saturated_host_keeps_its_leader(tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    cluster = Cluster(tmp_path / "raft")
    runs: list[threading.Thread] = []
    try:
        for port in cluster.ports:
            cluster.start(port)
        leader = cluster.wait_leader()
        (cluster.ctl / "propose").touch()
        time.sleep(2.0)  # settled: every replica follows the leader and commits flow
        before = {p: cluster.view(p) for p in cluster.ports}
        assert all(before.values()), cluster.tails()
        cores = os.cpu_count() or 2
        outcomes: dict[int, Any] = {}
        for index in range(3):  # three migrations at once, together 3 x cores busy processes
            executor = _executor(tmp_path, index, cores)

            def run(index: int = index, executor: Executor = executor) -> None:
                outcomes[index] = executor.run(
                    _decision(index), 1, {"term": 1, "seq": index + 1}, lambda: True
                )

            runs.append(threading.Thread(target=run))
            runs[-1].start()
        for thread in runs:
            thread.join(timeout=180)
        after = {p: cluster.view(p) for p in cluster.ports}

        assert all(o.result == SUCCEEDED for o in outcomes.values()) and len(outcomes) == 3, outcomes
        niced = {int((tmp_path / f"nice-{i}").read_text()) for i in range(3)}
        assert niced == {min(19, base + proctree.DEFAULT_MIGRATION_NICE)}, (
            "migrations ran at the replica's priority"
        )
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base, (
            "the caller kept its priority"
        )

        assert all(after.values()), f"a replica stopped reporting under load:\n{cluster.tails()}"
        summary = {p: (before[p]["term"], after[p]["term"], after[p]["max_gap"]) for p in cluster.ports}  # type: ignore[index]
        print(f"term before/after and longest stall (s) per replica: {json.dumps(summary)}")
        assert all(b == a for b, a, _gap in summary.values()), f"an election under migration load: {summary}"
        assert cluster.leader() == leader
        assert after[leader]["committed"] > before[leader]["committed"], "commits kept flowing"  # type: ignore[index]
        assert not cluster.diverged()
    finally:
        for thread in runs:
            thread.join(timeout=60)
        cluster.close()
