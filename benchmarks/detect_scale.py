"""Detection time and controller CPU per tick at 100 and 1000 registered, reporting clusters
(issue 21, "Incremental reads"), as JSON.

For each N a fresh `qonnect kb serve` (SQLite) gets N clusters with one agent token each; a
bounded load generator (one asyncio process, one keep-alive connection per agent, a report with
heartbeat, ``--nodes`` nodes and one latency every ``--interval`` seconds, random phases) plays
the agents. In this process the controller's read path runs once per second exactly as
`controller/loop.py` ``step()`` runs it: ``journal.read_snapshot`` on a KBClient with the
controller's KB timeout (3 s), the KB-outage and host-stall grace of the loop (a failed or slow
read restarts the heartbeat grace), and ``detector.down_clusters`` over the Snapshot. ``--read
whole`` measures the previous read (four whole GETs per tick) for comparison.

After a warm-up, ``--trials`` times one cluster's agent is stopped (the next is then started
again); detection is the time from the moment its heartbeat became older than the heartbeat
timeout (its last acknowledged report + 6 s: nothing can judge it earlier) to the tick whose
Snapshot judges it down (``down_clusters``: the cluster-down judgement); ``detect_from_stop``
adds the timeout. Per tick: CPU of the tick's thread (``time.thread_time``: read, decode, view
update, Snapshot, detector rule) and wall time.

    python benchmarks/detect_scale.py --json                       # N = 100, 1000 with the feed
    python benchmarks/detect_scale.py --json --ns 1000 --read whole
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kb import Server, prepare  # noqa: E402

HEARTBEAT_TIMEOUT = 6.0  # the controller's default (detector.Settings)
TICK = 1.0
KB_TIMEOUT = max(2.0, TICK * 3)  # loop.py: the controller's KB client
STALL_LIMIT = max(2.0 * TICK, HEARTBEAT_TIMEOUT / 2)  # loop.py: a read slower than this is a stall


# -- the load generator (a child process) ----------------------------------------------------
def _report(name: str, seq: int, nodes: int) -> bytes:
    body = {
        "seq": seq,
        "ts": time.time(),
        "reachable": True,
        "nodes": [
            {
                "name": f"{name}-n{i}",
                "ready": True,
                "allocatable": {"cpu": 8.0, "memory": 16_000_000_000, "ephemeral_storage": 100_000_000_000},
                "requested": {"cpu": 1.0, "memory": 1_000_000_000, "ephemeral_storage": 0},
                "labels": {"kubernetes.io/hostname": f"{name}-n{i}"},
            }
            for i in range(nodes)
        ],
        "workloads": [],
        "latencies": {"kb": 1.0},
    }
    return json.dumps(body).encode()


async def _agent(port: int, name: str, token: str, interval: float, nodes: int, stopped: set[str]) -> None:
    await asyncio.sleep(random.random() * interval)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /api/v1/clusters/{name}/reports HTTP/1.1\r\nHost: kb\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: "
    )
    seq = int(time.time() * 1e6)
    last_ack, told = 0.0, False
    while True:
        started = time.monotonic()
        if name in stopped and not told:  # say when its last report was acknowledged
            print(f"last {name} {last_ack!r}", flush=True)
            told = True
        if name not in stopped:
            told = False
            seq += 1
            body = _report(name, seq, nodes)
            writer.write(f"{head}{len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            length = 0
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line in (b"\r\n", b"\n"):
                    break
            answer = await reader.readexactly(length)
            if b'"seq"' in answer:
                last_ack = time.time()
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


async def _generate(port: int, pairs: list[tuple[str, str]], interval: float, nodes: int) -> None:
    stopped: set[str] = set()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks = [asyncio.create_task(_agent(port, n, t, interval, nodes, stopped)) for n, t in pairs]
    while True:
        line = (await reader.readline()).decode().split()
        if not line:
            break
        verb, name = line
        (stopped.add if verb == "stop" else stopped.discard)(name)
    for task in tasks:
        task.cancel()


def generator_main(argv: list[str]) -> int:
    port, interval, nodes, pairs_file = int(argv[0]), float(argv[1]), int(argv[2]), argv[3]
    pairs = [tuple(p) for p in json.loads(Path(pairs_file).read_text())]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_generate(port, pairs, interval, nodes))  # type: ignore[arg-type]
    return 0


# -- the controller's read path, timed -----------------------------------------------------------
class Acks:
    """When each stopped agent's last report was acknowledged (the generator says it)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import threading

        self.last: dict[str, float] = {}
        self.proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "last":
                self.last[parts[1]] = float(parts[2])


def run(n: int, args: argparse.Namespace) -> dict[str, Any]:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
    from qonnect.controller import journal
    from qonnect.controller.detector import Settings, down_clusters

    settings = Settings(heartbeat_timeout=HEARTBEAT_TIMEOUT)
    with tempfile.TemporaryDirectory(prefix="detect-scale-") as tmp:
        db_url = f"sqlite://{tmp}/kb.sqlite"
        admin, pairs = prepare(db_url, n)
        with Server(db_url, tmp, n + 64) as server:
            url = f"http://127.0.0.1:{server.port}"
            token = KBClient(url, admin).request("POST", "/api/v1/tokens", {"role": "controller"})["token"]
            kb = KBClient(url, token, timeout=KB_TIMEOUT)
            pairs_file = Path(tmp) / "pairs.json"
            pairs_file.write_text(json.dumps(pairs))
            gen = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--generator",
                    str(server.port),
                    str(args.interval),
                    str(args.nodes),
                    str(pairs_file),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            acks = Acks(gen)
            read = journal.read_snapshot if args.read == "feed" else journal.read_whole
            ticks: list[tuple[float, float, int]] = []  # cpu, wall, bytes-free marker
            failures = 0
            ok_since: float | None = None
            detections: list[float] = []
            victims = [pairs[(i * 7919) % n][0] for i in range(args.trials)]
            kb_cpu0 = server.cpu_seconds()
            proc_cpu0 = time.process_time()
            try:
                warm_until = time.monotonic() + args.warmup
                trial, stopped_at, victim = 0, None, None
                while trial < len(victims):
                    began = time.monotonic()
                    cpu0 = time.thread_time()
                    try:
                        snapshot, _placements = read(kb, time.time())
                    except KBError:
                        failures += 1
                        ok_since = None
                        snapshot = None
                    wall = time.monotonic() - began
                    if snapshot is not None:
                        if ok_since is None:
                            ok_since = time.monotonic()
                        if wall > STALL_LIMIT:  # loop.py Ticks.stalled: staleness is no failure now
                            ok_since = time.monotonic()
                        heard = time.monotonic() - ok_since
                        import dataclasses

                        snapshot = dataclasses.replace(snapshot, heard_for=heard)
                        down = down_clusters(snapshot, settings) if heard >= HEARTBEAT_TIMEOUT else {}
                    else:
                        down = {}
                    cpu = time.thread_time() - cpu0
                    if time.monotonic() >= warm_until:
                        if not ticks:
                            proc_cpu0 = time.process_time()
                        ticks.append((cpu, wall, 0))
                        if victim is None:
                            victim = victims[trial]
                            gen.stdin.write(f"stop {victim}\n")  # type: ignore[union-attr]
                            gen.stdin.flush()  # type: ignore[union-attr]
                            stopped_at = time.time()
                        elif victim in down:
                            last = acks.last.get(victim) or stopped_at or 0.0
                            detections.append(time.time() - (last + HEARTBEAT_TIMEOUT))
                            gen.stdin.write(f"start {victim}\n")  # type: ignore[union-attr]
                            gen.stdin.flush()  # type: ignore[union-attr]
                            victim, trial = None, trial + 1
                            warm_until = time.monotonic() + args.interval * 2 + 1  # it reports again
                        elif stopped_at is not None and time.time() - stopped_at > args.give_up:
                            detections.append(float("inf"))
                            gen.stdin.write(f"start {victim}\n")  # type: ignore[union-attr]
                            gen.stdin.flush()  # type: ignore[union-attr]
                            victim, trial = None, trial + 1
                    time.sleep(max(0.05, TICK - (time.monotonic() - began)))
            finally:
                gen.stdin.close()  # type: ignore[union-attr]
                gen.terminate()
                gen.wait(timeout=10)
            kb_cpu = server.cpu_seconds() - kb_cpu0
            proc_cpu = time.process_time() - proc_cpu0
    cpus = sorted(t[0] * 1000 for t in ticks)
    walls = sorted(t[1] * 1000 for t in ticks)
    finite = sorted(d for d in detections if d != float("inf"))
    return {
        "clusters": n,
        "read": args.read,
        "nodes_per_cluster": args.nodes,
        "ticks": len(ticks),
        "kb_read_failures": failures,
        "tick_cpu_ms": _pct(cpus),
        "tick_wall_ms": _pct(walls),
        "detect_seconds": _pct(finite),
        "detect_from_stop_seconds": _pct([d + HEARTBEAT_TIMEOUT for d in finite]),
        "undetected": len(detections) - len(finite),
        # every thread of this process (the periodic full read in the background too), per tick
        "controller_cpu_ms_per_tick_all_threads": round(1000 * proc_cpu / max(1, len(ticks)), 3),
        "kb_cpu_seconds_per_tick": round(kb_cpu / max(1, len(ticks)), 4),
    }


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    values = sorted(values)
    p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
    return {
        "p50": round(statistics.median(values), 3),
        "p99": round(p99, 3),
        "max": round(values[-1], 3),
        "n": len(values),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--generator":
        return generator_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="100,1000", help="registered clusters, comma-separated")
    parser.add_argument("--read", choices=("feed", "whole"), default="feed")
    parser.add_argument("--nodes", type=int, default=5, help="nodes per reported cluster")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between an agent's reports")
    parser.add_argument("--trials", type=int, default=10, help="agents stopped one after another")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--give-up", type=float, default=120.0, help="seconds before a trial is undetected")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(int(n), args) for n in args.ns.split(",")]
    doc = {
        "benchmark": "detect_scale",
        "cpus": os.cpu_count(),
        "targets": {"detect_p99_seconds_at_1000": 5.0, "tick_cpu_ms_at_1000": 50.0},
        "results": results,
    }
    print(json.dumps(doc, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
