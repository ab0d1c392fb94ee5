"""Migrations run below the replica's CPU priority, so a host they saturate keeps its leader.

Real migration runs (the controller's Executor, ansible-runner, ansible-playbook, a module
that keeps every core busy, as migrations did in issue 21) run inside the leader of three real
RaftNode replicas (``_raft_replica.py``), as the controller loop runs them, while the leader
commits commands back to back. The runs' processes carry
the lowered priority; no replica sees a new term while they run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _raft_cluster import Cluster
from qonnect.controller import proctree
from qonnect.controller.executor import SUCCEEDED

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
            for _i in range(int(sys.argv[2]) - 1):
                if os.fork() == 0:
                    break
            while time.monotonic() < end:
                pass
          - "{{ out }}"
          - "{{ procs }}"
          - "{{ seconds }}"
"""


def test_migrations_run_niced_and_a_saturated_host_keeps_its_leader(tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    cluster = Cluster(tmp_path / "raft")
    try:
        for port in cluster.ports:
            cluster.start(port)
        leader = cluster.wait_leader()
        (cluster.ctl / "propose").touch()
        time.sleep(2.0)  # settled: every replica follows the leader and commits flow
        before = {p: cluster.view(p) for p in cluster.ports}
        assert all(before.values()), cluster.tails()

        playbook = tmp_path / "busy.yml"
        playbook.write_text(PLAYBOOK)
        token = tmp_path / "token"
        token.write_text("unused-kb-token")
        token.chmod(0o600)
        order = {  # three migrations at once in the leader's process, 3 x cores busy processes
            "playbook": str(playbook),
            "runs": str(tmp_path / "runs"),
            "token": str(token),
            "count": 3,
            "extra": {"procs": os.cpu_count() or 2, "seconds": BUSY_SECONDS},
        }
        (cluster.ctl / "migrate").write_text(json.dumps(order))
        deadline = time.monotonic() + 150
        done: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = cluster.view(leader)
            done = view["migrations"] if view else {}
            if len(done) == 4:  # "started" and the three outcomes
                break
            time.sleep(0.2)
        after = {p: cluster.view(p) for p in cluster.ports}

        assert [done.get(str(i)) for i in range(3)] == [SUCCEEDED] * 3, f"{done}\n{cluster.tails()}"
        niced = {int(f.read_text()) for f in (tmp_path / "runs").glob("nice-*")}
        assert niced == {min(19, base + proctree.DEFAULT_MIGRATION_NICE)}, (
            "migrations ran at the replica's priority"
        )

        assert all(after.values()), f"a replica stopped reporting under load:\n{cluster.tails()}"
        summary = {p: (before[p]["term"], after[p]["term"], after[p]["max_gap"]) for p in cluster.ports}  # type: ignore[index]
        print(f"term before/after and longest stall (s) per replica: {json.dumps(summary)}")
        assert all(b == a for b, a, _gap in summary.values()), f"an election under migration load: {summary}"
        assert cluster.leader() == leader
        assert after[leader]["committed"] > before[leader]["committed"], "commits kept flowing"  # type: ignore[index]
        assert not cluster.diverged()
    finally:
        cluster.close()
