"""KB heartbeat benchmark: sustained agent reports per second and their latency.

Starts a real `qonnect kb serve` per backend (a fresh SQLite file; a throw-away PostgreSQL
database, served by ``--instances`` KB processes sharing it), registers N clusters with one agent
token each, then N simulated agents, each on its own keep-alive connection, send reports
(heartbeat + one node + a latency) at a fixed aggregate rate (open loop, random phases). With
several instances the agents are spread round-robin over them, as a simple load balancer would.
Latency is measured from sending a request to reading its whole answer, which the KB gives only
after the report is durably committed. Each run also records, per measured second, the p99 and
the share of the machine's CPU time the hypervisor gave elsewhere (steal, from /proc/stat): on a
virtual machine a second it lost shows up as a slow second.

The load generator shares the machine's CPUs with the KB, so it is kept cheap: one uvloop
process writing HTTP/1.1 requests on raw sockets, the agents driven by timer callbacks, no
garbage collection while measuring. (A Go generator was tried: it used as much CPU per report,
the system calls dominate, and gave no better latencies.)

    python benchmarks/kb.py --json      # SQLite: 1000 agents, 2000/s; PostgreSQL: 2 instances,
                                        # 10000 agents, 5000/s
    python benchmarks/kb.py --backends sqlite --rate 3000 --duration 20 --runs 3
    python benchmarks/kb.py --backends postgresql --instances 1 --pg-rate 2000 --pg-agents 4000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

try:
    import uvloop
except ImportError:  # pragma: no cover - plain asyncio works, just slower
    uvloop = None

TARGET_RATE = 2000.0
TARGET_P99_MS = 50.0
PG_TARGET_RATE = 5000.0  # 10,000 clusters reporting every 2 s
PG_TARGET_AGENTS = 10_000
PG_TARGET_P99_MS = 100.0

# `python -m qonnect.cli` would load cli.py twice (as __main__ too); run main() instead
MAIN = "import sys; from qonnect.cli import main; sys.exit(main())"


# -- set-up ---------------------------------------------------------------------------------
def prepare(db_url: str, agents: int) -> tuple[str, list[tuple[str, str]]]:
    """Migrate, register the clusters and make one agent token each, straight in the DB."""
    from qonnect.kb import auth, migrations, ops
    from qonnect.kb.storage import Database

    db = Database(db_url)
    migrations.migrate(db)
    conn = db.connect()
    now = time.time()
    pairs = []
    conn.begin()
    admin = auth.insert_token(conn, "admin", None, "bench-admin", now)["token"]
    for i in range(agents):
        name = f"bench-{i:04d}"
        ops.create_cluster(
            conn, {"name": name, "tier": ("cloud", "fog", "edge")[i % 3], "location": name, "labels": {}}, now
        )
        pairs.append((name, auth.insert_token(conn, "agent", name, None, now)["token"]))
    conn.commit()
    db.close()
    return admin, pairs


class Server:
    """`qonnect kb serve` on a free port, stopped (and killed if need be) on exit."""

    def __init__(self, db_url: str, workdir: str, connections: int) -> None:
        self.db_url = db_url
        self.port_file = Path(workdir) / f"port-{uuid.uuid4().hex[:6]}"
        self.connections = connections
        self.proc: subprocess.Popen | None = None
        self.log = open(Path(workdir) / f"kb-{uuid.uuid4().hex[:6]}.log", "wb")  # noqa: SIM115 - closed in __exit__

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                MAIN,
                "kb",
                "serve",
                "--db",
                self.db_url,
                "--port",
                "0",
                "--port-file",
                str(self.port_file),
                "--max-connections",
                str(self.connections),
            ],
            stdout=subprocess.DEVNULL,
            # a file, not a pipe: nobody reads a pipe while measuring, and a full one would
            # stop the KB at its next log line
            stderr=self.log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = Path(self.log.name).read_text(errors="replace")
                self.__exit__()
                raise RuntimeError(f"the KB did not start: {err[-2000:]}")
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU time the KB process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def log_lines(self) -> list[str]:
        """What the KB wrote besides its start-up line (warnings, errors)."""
        self.log.flush()
        lines = Path(self.log.name).read_text(errors="replace").splitlines()
        return [line for line in lines if not line.startswith("qonnect kb: serving")]


# -- load generator -------------------------------------------------------------------------
_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length:[ \t]*(\d+)")


class Load:
    """The measured window and what was seen in it, shared by all agents."""

    def __init__(self, loop: asyncio.AbstractEventLoop, start: float, warmup: float, duration: float) -> None:
        self.loop = loop
        self.start = start
        self.measure_from = start + warmup
        self.measure_to = start + warmup + duration
        self.latencies: list[float] = []
        self.seconds: dict[int, list[float]] = {}  # latencies by second of the measured window
        self.errors = 0
        self.late = 0
        self.sent = 0
        self.running = 0
        self.finished = loop.create_future()

    def done(self) -> None:
        self.running -= 1
        if self.running == 0 and not self.finished.done():
            self.finished.set_result(None)


class Agent(asyncio.Protocol):
    """One simulated agent: a keep-alive connection with at most one request in flight, driven
    by timer callbacks (a coroutine and a sleep per request cost the load generator twice the
    CPU, taken from the KB it measures on a 2-core machine)."""

    def __init__(self, cluster: str, token: str) -> None:
        self.head = (
            f"POST /api/v1/clusters/{cluster}/reports HTTP/1.1\r\nHost: kb\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Content-Length: "
        )
        self.node = cluster + "-w"
        self.seq = 0
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.load: Load | None = None
        self.interval = 0.0
        self.due = 0.0
        self.sent_at = 0.0  # perf_counter when the request in flight was sent
        self.sent_loop = 0.0  # its loop time, which decides whether it is measured
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost and self.load is not None:
            self.lost = True
            if self.sent_at and self.load.measure_from <= self.sent_loop < self.load.measure_to:
                self.load.errors += 1
            self.load.done()

    def begin(self, load: Load, interval: float) -> None:
        self.load, self.interval = load, interval
        self.due = load.start + random.random() * interval
        load.running += 1
        load.loop.call_at(self.due, self.fire)

    def fire(self) -> None:
        load = self.load
        if self.lost or self.due >= load.measure_to:
            self.lost = True
            load.done()
            return
        now = load.loop.time()
        if now - self.due > self.interval:
            load.late += 1
        self.seq += 1
        requested = 268435456 + self.seq % 7  # pods come and go: the node data changes
        body = (
            f'{{"seq":{self.seq},"ts":{time.time():.3f},"reachable":true,'
            f'"latencies":{{"kb":0.5}},"nodes":[{{"name":"{self.node}","ready":true,'
            '"schedulable":true,"allocatable":{"cpu":6.0,"memory":7160000000,'
            f'"ephemeral_storage":0}},"requested":{{"cpu":0.5,"memory":{requested},'
            '"ephemeral_storage":0},"bandwidth_gbps":52.5,"energy_kwh":0.0024042,'
            '"price_eur_h":16.3884}]}'
        ).encode()
        load.sent += 1
        self.sent_loop = now
        self.sent_at = time.perf_counter()
        self.transport.write(f"{self.head}{len(body)}\r\n\r\n".encode() + body)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        match = _CONTENT_LENGTH.search(self.buf, 0, end + 2)
        length = int(match.group(1)) if match else 0
        if len(self.buf) < end + 4 + length:
            return
        status = int(self.buf[9:12])
        self.buf = self.buf[end + 4 + length :]
        latency = time.perf_counter() - self.sent_at
        self.sent_at = 0.0
        load = self.load
        if load.measure_from <= self.sent_loop < load.measure_to:
            if status == 200:
                load.latencies.append(latency)
                load.seconds.setdefault(int(self.sent_loop - load.measure_from), []).append(latency)
            else:
                load.errors += 1
        self.due += self.interval
        load.loop.call_at(self.due, self.fire)  # at once if it is overdue


def _cpu_times() -> tuple[int, int]:
    """(steal, all) CPU ticks of the machine so far (Linux /proc/stat; zeros elsewhere)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return (0, 0)
    return (ticks[7] if len(ticks) > 7 else 0, sum(ticks[:8]))


class StealClock:
    """Steal time in each second of the measured window, read once a second by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, start: float, duration: float) -> None:
        self.by_second: list[float] = []
        self.loop = loop
        self.seconds = int(duration)
        self.last: tuple[int, int] | None = None
        loop.call_at(start, self._tick, start)

    def _tick(self, at: float) -> None:
        now = _cpu_times()
        if self.last is not None:
            steal, total = now[0] - self.last[0], now[1] - self.last[1]
            self.by_second.append(round(100 * steal / total, 1) if total else 0.0)
        self.last = now
        if len(self.by_second) < self.seconds:
            self.loop.call_at(at + 1, self._tick, at + 1)


async def run_load(
    ports: list[int], pairs: list[tuple[str, str]], rate: float, warmup: float, duration: float
) -> dict:
    loop = asyncio.get_running_loop()
    agents = []
    for i, (cluster, token) in enumerate(pairs):  # round-robin over the KB instances
        _transport, proto = await loop.create_connection(
            lambda c=cluster, t=token: Agent(c, t), "127.0.0.1", ports[i % len(ports)]
        )
        agents.append(proto)
    load = Load(loop, loop.time() + 0.5, warmup, duration)
    for agent in agents:
        agent.begin(load, len(agents) / rate)
    stolen = StealClock(loop, load.measure_from, duration)
    # the generator's own collections would show up as the KB's latency: none while measuring
    gc.collect()
    gc.disable()
    try:
        await load.finished
    finally:
        gc.enable()
    for agent in agents:
        if agent.transport:
            agent.transport.close()
    latencies = sorted(load.latencies)

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 2)

    return {
        "agents": len(agents),
        "target_rate": rate,
        "duration_s": duration,
        "sent": load.sent,
        "requests": len(latencies),
        "errors": load.errors,
        "late_sends": load.late,
        "rate": round(len(latencies) / duration, 1),
        "p50_ms": pct(0.50) if latencies else None,
        "p99_ms": pct(0.99) if latencies else None,
        "max_ms": round(latencies[-1] * 1000, 2) if latencies else None,
        # the share of the machine's CPU time the hypervisor gave to others (a VM's steal),
        # per second of the window: a slow second may be one the machine lost
        "steal_pct_by_second": stolen.by_second,
        # where in the window the slow ones were (a stall, a periodic job, a slow start)
        "p99_ms_by_second": [
            round(sorted(v)[int(0.99 * (len(v) - 1))] * 1000, 1) for _s, v in sorted(load.seconds.items())
        ],
    }


# -- backends -------------------------------------------------------------------------------
def database_cpu_seconds(dbname: str | None) -> float | None:
    """User + system CPU of the PostgreSQL backends and autovacuum workers of ``dbname`` (a
    server on this machine; their command line names the database), or None for SQLite (inside
    the KB process)."""
    if dbname is None:
        return None
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            # "postgres: 15/main: USER DB HOST(PORT) STATE", "... autovacuum worker DB"
            if (
                not cmdline.startswith(b"postgres:")
                or dbname.encode() not in cmdline.replace(b"\0", b" ").split()
            ):
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the backend ended meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextlib.contextmanager
def database(backend: str, workdir: str, pg_url: str):
    if backend == "sqlite":
        yield f"sqlite://{Path(workdir) / 'kb.sqlite'}"
        return
    import psycopg

    name = f"qkb_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{pg_url.rsplit('/', 1)[0]}/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench(backend: str, args: argparse.Namespace) -> dict:
    """One backend: a fresh database, its KB instance(s), ``args.runs`` measured runs."""
    pg = backend == "postgresql"
    instances = args.instances if pg else 1
    agents = args.pg_agents if pg else args.agents
    rate = args.pg_rate if pg else args.rate
    with (
        tempfile.TemporaryDirectory(prefix="qkb-bench-") as workdir,
        database(backend, workdir, args.pg_url) as db_url,
        contextlib.ExitStack() as stack,
    ):
        _tokens, pairs = prepare(db_url, agents)
        servers = [stack.enter_context(Server(db_url, workdir, agents + 100)) for _i in range(instances)]
        runner = uvloop.run if uvloop else asyncio.run
        runs = []
        dbname = db_url.rsplit("/", 1)[1] if pg else None
        for _run in range(args.runs):
            database_cpu = database_cpu_seconds(dbname)
            server_cpu = sum(s.cpu_seconds() for s in servers)
            own_cpu = time.process_time()
            load_before = os.getloadavg()[0]
            result = runner(run_load([s.port for s in servers], pairs, rate, args.warmup, args.duration))
            generator_cpu = time.process_time() - own_cpu
            # CPU per request shows the KB's capacity apart from what else runs on the machine
            per_request = 1000 / max(1, result["sent"])
            result["server_cpu_ms_per_request"] = round(
                (sum(s.cpu_seconds() for s in servers) - server_cpu) * per_request, 3
            )
            result["loadgen_cpu_ms_per_request"] = round(generator_cpu * per_request, 3)
            # a backend that ended during the run is missed: a lower bound
            after = database_cpu_seconds(dbname)
            result["database_cpu_ms_per_request"] = (
                None
                if after is None or database_cpu is None
                else round((after - database_cpu) * per_request, 3)
            )
            result["loadavg"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # 1 min, before/after
            runs.append(result)
        logged = [line for s in servers for line in s.log_lines()]
    # a KB that logged while measured (a failed batch, a retried conflict) says so here
    return {
        "instances": instances,
        **_summary(runs),
        "kb_log_lines": len(logged),
        "kb_log": logged[-20:],
        "runs": runs,
    }


def _summary(runs: list[dict]) -> dict:
    """The runs in the single-run shape (benchmarks/report.py reads it), pessimistically: the
    lowest rate, the worst p99 and max, the median p50, all errors."""

    def worst(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return max(values) if values else None

    p50s = sorted(r["p50_ms"] for r in runs if r["p50_ms"] is not None)

    def mean(key: str) -> float:
        return round(sum(r[key] for r in runs) / len(runs), 3)

    return {
        "agents": runs[0]["agents"],
        "target_rate": runs[0]["target_rate"],
        "duration_s": runs[0]["duration_s"],
        "rate": min(r["rate"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "p50_ms": p50s[len(p50s) // 2] if p50s else None,
        "p99_ms": worst("p99_ms"),
        "max_ms": worst("max_ms"),
        "p99_ms_per_run": [r["p99_ms"] for r in runs],
        "server_cpu_ms_per_request": mean("server_cpu_ms_per_request"),
        "loadgen_cpu_ms_per_request": mean("loadgen_cpu_ms_per_request"),
        "database_cpu_ms_per_request": mean("database_cpu_ms_per_request")
        if all(r.get("database_cpu_ms_per_request") is not None for r in runs)
        else None,
    }


def _met(result: dict | None, rate: float, p99: float) -> bool | None:
    """Every run: the offered rate sustained, no errors, p99 under the target."""
    if result is None:
        return None
    return bool(
        result["rate"] >= 0.98 * rate
        and result["errors"] == 0
        and result["p99_ms"] is not None
        and result["p99_ms"] < p99
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--agents", type=int, default=1000, help="SQLite: simulated agents")
    parser.add_argument("--rate", type=float, default=TARGET_RATE, help="SQLite: reports per second")
    parser.add_argument(
        "--pg-agents", type=int, default=PG_TARGET_AGENTS, help="PostgreSQL: simulated agents"
    )
    parser.add_argument(
        "--pg-rate", type=float, default=PG_TARGET_RATE, help="PostgreSQL: reports per second"
    )
    parser.add_argument(
        "--instances", type=int, default=2, help="PostgreSQL: KB processes sharing the database"
    )
    parser.add_argument("--runs", type=int, default=1, help="measured runs per backend")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("QONNECT_BENCH_PG")
        or os.environ.get("QONNECT_TEST_PG")
        or "postgresql://127.0.0.1:5432/test",
        help="a database to create throw-away databases from (default: $QONNECT_BENCH_PG, $QONNECT_TEST_PG)",
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results = {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        results[backend] = bench(backend, args)
        if not args.json:
            print(backend, json.dumps(results[backend]), flush=True)
    report = {
        "benchmark": "kb-heartbeats",
        # how to repeat it (a database URL's credentials left out)
        "command": re.sub(
            r"//[^@/\s]*@",
            "//",
            " ".join(["python", "benchmarks/kb.py", *(sys.argv[1:] if argv is None else argv)]),
        ),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # other work on the machine competes with the KB and the load generator
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "targets": {
            "sqlite_rate_min": TARGET_RATE,
            "sqlite_p99_ms_max": TARGET_P99_MS,
            "postgresql_rate_min": PG_TARGET_RATE,
            "postgresql_instances": 2,
            "postgresql_p99_ms_max": PG_TARGET_P99_MS,
        },
        "results": results,
        # judged against the targets only when run with the target's parameters
        "target_met": {
            "sqlite": _met(results.get("sqlite"), TARGET_RATE, TARGET_P99_MS)
            if args.rate == TARGET_RATE
            else None,
            "postgresql": _met(results.get("postgresql"), PG_TARGET_RATE, PG_TARGET_P99_MS)
            if (args.pg_rate, args.pg_agents, args.instances) == (PG_TARGET_RATE, PG_TARGET_AGENTS, 2)
            else None,
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
