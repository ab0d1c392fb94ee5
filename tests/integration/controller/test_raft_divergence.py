"""Leader churn under load never truncates applied entries, and the replicas end up equal.

Three real RaftNode replicas (each its own process, ``_raft_replica.py``) commit commands back
to back while the leader is paused (SIGSTOP, as a starved host does to it), killed and
restarted, and followers are paused, with CPU-bound children running beside them like
migrations, and replicas stutter (stopped and continued in short bursts, as on a starved
host). pysyncobj 0.3.17's follower truncated its log after ``prevLogIdx`` whenever the log was
longer, even when every entry matched (a late or repeated append after the leader moved its next
index back on a late reply), logging ``truncating already-applied log entries ... state machine
may have diverged``; issue 21 saw it three times under migration load.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from _raft_cluster import Cluster, busy_children

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_leader_churn_under_load_never_truncates_applied_entries(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("QONNECT_CHURN_SEED", "21")))
    cluster = Cluster(tmp_path)
    busy: list[subprocess.Popen[bytes]] = []
    try:
        for port in cluster.ports:
            cluster.start(port)
        cluster.wait_leader()
        (cluster.ctl / "propose").touch()
        busy = busy_children(3 * (os.cpu_count() or 2))  # a host saturated as by un-niced migrations
        churn_until = time.monotonic() + float(os.environ.get("QONNECT_CHURN_SECONDS", "50"))
        rounds = 0
        while time.monotonic() < churn_until:
            leader = cluster.wait_leader()
            time.sleep(rng.uniform(0.3, 1.2))  # commits flow under this leader
            action = rng.choice(["slow", "slow", "stutter", "pause-leader", "kill-leader", "pause-follower"])
            if action == "slow":  # a follower's answers reach the leader late (after its next appends)
                follower = rng.choice([p for p in cluster.ports if p != leader])
                cluster.slow(follower, rng.uniform(0.15, 0.4))
                time.sleep(rng.uniform(1.5, 3.0))
                cluster.slow(follower, 0)
            elif action == "stutter":  # a starved host: replicas run in short bursts between stops
                stutter_until = time.monotonic() + rng.uniform(1.0, 3.0)
                while time.monotonic() < stutter_until:
                    victim = rng.choice(cluster.ports)
                    cluster.pause(victim)
                    time.sleep(rng.uniform(0.05, 0.3))
                    cluster.resume(victim)
                    time.sleep(rng.uniform(0.01, 0.08))
            elif action == "pause-leader":
                cluster.pause(leader)
                time.sleep(rng.uniform(0.8, 2.5))  # long enough for an election, sometimes not
                cluster.resume(leader)
            elif action == "kill-leader":  # it restarts and catches up from its journal
                cluster.kill(leader)
                time.sleep(rng.uniform(0.3, 1.5))
                cluster.start(leader)
            else:
                follower = rng.choice([p for p in cluster.ports if p != leader])
                cluster.pause(follower)
                time.sleep(rng.uniform(0.2, 1.5))
                cluster.resume(follower)
            rounds += 1
        (cluster.ctl / "propose").unlink()
        for proc in busy:
            proc.kill()
        deadline = time.monotonic() + 60
        views = cluster.converged()
        while views is None and time.monotonic() < deadline:
            time.sleep(0.2)
            views = cluster.converged()
        assert views is not None, f"replicas did not converge to one state:\n{cluster.tails()}"
        terms = {v["term"] for v in views}
        assert rounds >= 5 and views[0]["seq"] > 10 and views[0]["term"] > 1, (
            rounds,
            views,
        )  # churn, commits
        warnings = cluster.diverged()
        assert not warnings, "pysyncobj truncated applied entries under churn:\n" + "\n".join(warnings)
        print(f"{rounds} churn rounds, terms {terms}, {views[0]['applied']} entries applied on every replica")
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        cluster.close()
