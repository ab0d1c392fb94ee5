"""Raft commit latency with the journal flushed before every acknowledgement, and without.

A cluster of --replicas RaftNode replicas (one process each, the controller's default timing)
with their journals in --dir (on disk: the filesystem is reported, tmpfs would make a flush
free) commits --commits proposals through the replicated decision log, once with the durable
acknowledgement (issue 38: a replica acknowledges entries and votes, and the leader counts its
own entries, only once its journal is flushed) and once with ``RaftNode(durable=False)``,
pysyncobj's behaviour (nothing flushed). Each is measured with proposals one at a time and with
--concurrency proposals in flight (several per append: the flush is per tick, not per entry).

Reported per run: commit latency (median, p99, max, in ms, as ``propose`` returns), journal
flushes per commit (the leader's, and the mean of the followers'), how long one flush took, and
other fsyncs per commit (term, vote and commit index, stored at most once a second, and the
journal's directory).

    .venv/bin/python benchmarks/raft_commit.py --json
    .venv/bin/python benchmarks/raft_commit.py --json --quick      # 50 commits
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
sys.path.insert(0, str(ROOT / "tests"))  # the shared test helpers (support.free_port)

from support import free_port  # noqa: E402

NODE_TIMEOUT = 300.0  # seconds a replica process waits for its run to finish


# -- one replica (a child process) ---------------------------------------------------------------


class Counters:
    """This process's flushes of the journal (with their duration) and its other fsyncs."""

    def __init__(self) -> None:
        from qonnect.controller import raft_durability

        self.flush_ms: list[float] = []
        self.fsyncs = 0
        sync, fsync = raft_durability.DurableJournal.sync, os.fsync

        def timed_sync(journal: Any) -> bool:
            start = time.perf_counter()
            done = bool(sync(journal))
            if done:
                self.flush_ms.append((time.perf_counter() - start) * 1000)
            return done

        def counted_fsync(fd: int) -> None:
            self.fsyncs += 1
            fsync(fd)

        raft_durability.DurableJournal.sync = timed_sync
        os.fsync = counted_fsync

    def reading(self, node: Any) -> dict[str, Any]:
        return {"flushes": node.gate.flushes, "flush_samples": len(self.flush_ms), "fsyncs": self.fsyncs}


def propose_all(node: Any, count: int, concurrency: int) -> list[float]:
    """COUNT proposals, CONCURRENCY at a time; each one's latency in ms."""
    samples: list[float] = []

    def worker(share: int, offset: int) -> None:
        for i in range(share):
            start = time.perf_counter()
            node.propose({"op": "observe", "app": f"bench-{offset}", "version": i}, timeout=10)
            samples.append((time.perf_counter() - start) * 1000)

    shares = [count // concurrency + (1 if w < count % concurrency else 0) for w in range(concurrency)]
    threads = [threading.Thread(target=worker, args=(s, w)) for w, s in enumerate(shares)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


def node_main(self_addr: str, peers: str, secret_file: str, data_dir: str, run: str) -> None:
    """One replica: the one that leads runs the proposals; every one reports its counters from
    the start of the measured proposals (``RUN.start``) to their end (``RUN.done``)."""
    from qonnect.controller.raft import RaftNode
    from qonnect.controller.raft_config import read_secret

    spec = json.loads(Path(run + ".json").read_text())
    counters = Counters()
    node = RaftNode(self_addr, peers.split(","), read_secret(secret_file), data_dir, durable=spec["durable"])
    start, done = Path(run + ".start"), Path(run + ".done")
    deadline = time.monotonic() + NODE_TIMEOUT
    before: dict[str, Any] | None = None
    result: dict[str, Any] = {"leader": False}
    while time.monotonic() < deadline and not done.exists():
        if before is None and start.exists():
            before = counters.reading(node)
        if before is None and node.is_leader():
            node.propose({"op": "leader"}, timeout=10)  # a first entry of the term, not measured
            before = counters.reading(node)
            start.touch()
            began = time.perf_counter()
            result["samples"] = propose_all(node, spec["commits"], spec["concurrency"])
            result.update(leader=True, seconds=time.perf_counter() - began)
            done.touch()
            break
        time.sleep(0.005)
    after = counters.reading(node)
    node.destroy()
    if before is not None:
        result["counts"] = {k: after[k] - before[k] for k in after}
        result["flush_ms"] = counters.flush_ms[before["flush_samples"] :]
    out = Path(f"{run}.{self_addr.rsplit(':', 1)[1]}.out")
    out.with_suffix(".tmp").write_text(json.dumps(result))
    out.with_suffix(".tmp").replace(out)


# -- the parent ----------------------------------------------------------------------------------


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def cluster_run(workdir: Path, name: str, spec: dict[str, Any], replicas: int) -> dict[str, Any]:
    """Start REPLICAS processes for one run and gather what each reported."""
    secret = workdir / "secret"
    if not secret.exists():
        secret.write_text(os.urandom(24).hex())
        secret.chmod(0o600)
    run = workdir / name
    Path(f"{run}.json").write_text(json.dumps(spec))
    addrs = [f"127.0.0.1:{free_port()}" for _replica in range(replicas)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "_node",
                a,
                ",".join(addrs),
                str(secret),
                str(workdir / f"{name}-{i}"),
                str(run),
            ],
            stdout=subprocess.DEVNULL,
        )
        for i, a in enumerate(addrs)
    ]
    for proc in procs:
        proc.wait(timeout=NODE_TIMEOUT + 30)
    reports = [json.loads(Path(f"{run}.{a.rsplit(':', 1)[1]}.out").read_text()) for a in addrs]
    return summarise(spec, reports)


def summarise(spec: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any]:
    leader = next(r for r in reports if r["leader"])
    followers = [r for r in reports if not r["leader"] and "counts" in r]
    commits = len(leader["samples"])
    ordered = sorted(leader["samples"])
    flush_ms = sorted(ms for r in reports for ms in r.get("flush_ms", []))
    other_fsyncs = sum(r["counts"]["fsyncs"] for r in [leader, *followers])
    return {
        "durable": spec["durable"],
        "concurrency": spec["concurrency"],
        "commits": commits,
        "commits_per_s": round(commits / leader["seconds"], 1),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(percentile(ordered, 0.99), 2),
        "max_ms": round(ordered[-1], 2),
        "flushes_per_commit": {
            "leader": round(leader["counts"]["flushes"] / commits, 3),
            "follower": round(
                statistics.mean(r["counts"]["flushes"] for r in followers) / commits if followers else 0.0, 3
            ),
        },
        "flush_ms": (
            {
                "n": len(flush_ms),
                "p50": round(statistics.median(flush_ms), 3),
                "p99": round(percentile(flush_ms, 0.99), 3),
            }
            if flush_ms
            else {"n": 0}
        ),
        "other_fsyncs_per_commit": round(other_fsyncs / commits / (1 + len(followers)), 3),
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding PATH, from /proc/mounts (the longest mount prefix)."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        point = fields[1]
        if (resolved == point or resolved.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_node"]:
        node_main(*argv[1:6])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only, on one line")
    parser.add_argument("--commits", type=int, default=300, help="proposals per run")
    parser.add_argument("--quick", action="store_true", help="50 proposals per run")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="proposals in flight, second pair of runs")
    parser.add_argument("--dir", default="/var/tmp", help="where the journals go (a disk, not tmpfs)")
    args = parser.parse_args(argv)
    commits = 50 if args.quick else args.commits
    load = round(os.getloadavg()[0], 2)
    runs = []
    with tempfile.TemporaryDirectory(prefix="raft-commit-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        for concurrency in (1, args.concurrency):
            for durable in (True, False):
                name = f"{'durable' if durable else 'unflushed'}-c{concurrency}"
                spec = {"durable": durable, "commits": commits, "concurrency": concurrency}
                runs.append(cluster_run(workdir, name, spec, args.replicas))
        fs = filesystem(workdir)
    from qonnect.controller.raft import Timing

    timing = Timing()  # the replicas' (the controller's default)
    report = {
        "replicas": args.replicas,
        "runs": runs,
        "settings": {
            "dir": args.dir,
            "filesystem": fs,
            "heartbeat_s": timing.heartbeat,
            "tick_s": timing.tick,
            "cpu_count": os.cpu_count(),
            "load_avg_1m_before": load,
        },
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
