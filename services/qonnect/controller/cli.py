"""``qonnect controller run`` (one replica) and ``qonnect controller status``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qonnect.controller.detector import (
    CLUSTER_GRACE,
    CLUSTER_GRACE_LABEL,
    MAX_VERSION_FAILURES,
    PROGRESSING_BACKSTOP,
)
from qonnect.controller.proctree import DEFAULT_MIGRATION_NICE, MAX_NICE, set_migration_nice
from qonnect.controller.timeouts import DEFAULT_WAIT_TIMEOUT, OWN_VARS, RUN_OVERHEAD, run_timeout_for
from qonnect.errors import UserError

if TYPE_CHECKING:
    from qonnect.controller.config import Config
    from qonnect.controller.detector import Settings
    from qonnect.controller.loop import Controller
    from qonnect.controller.replan import Planner

log = logging.getLogger("qonnect.controller")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("controller", help="Raft-replicated controller (Resource Lead Agents)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    run = sub.add_parser("run", help="run one controller replica")
    run.add_argument("--id", required=True, help="replica name, used in logs and runs")
    run.add_argument(
        "--self", dest="self_addr", required=True, metavar="HOST:PORT", help="this replica's Raft address"
    )
    run.add_argument(
        "--peers",
        required=True,
        metavar="HOST:PORT,...",
        help="Raft addresses of all replicas (this one may be included)",
    )
    run.add_argument("--kb", required=True, metavar="URL", help="KB base URL")
    run.add_argument("--token-file", required=True, help="file holding the controller's KB bearer token")
    run.add_argument(
        "--raft-secret-file", required=True, help="file (mode 0600) holding the shared Raft secret; required"
    )
    run.add_argument(
        "--data-dir", help="journal, snapshot and run artifacts (default ./qonnect-controller-ID)"
    )
    run.add_argument(
        "--http",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="status endpoint (/healthz, /metrics, /status); port 0 picks a free one",
    )
    run.add_argument(
        "--playbook", help="migration playbook (default: the collection's playbooks/migrate.yml)"
    )
    run.add_argument(
        "--agent-interval",
        type=float,
        default=2.0,
        help="Resource Agent report interval in seconds (heartbeat timeout default: 3x this)",
    )
    run.add_argument(
        "--heartbeat-timeout", type=float, help="seconds without a report before a cluster is down"
    )
    run.add_argument(
        "--cluster-grace",
        type=float,
        default=CLUSTER_GRACE,
        help="seconds a cluster whose agent is silent or cannot reach its API stays only suspect "
        "(the leader probes the API itself meanwhile) before its applications move (default "
        f"%(default)gs: a 15 s API-server outage never migrates); a cluster's label "
        f"{CLUSTER_GRACE_LABEL} overrides it",
    )
    run.add_argument(
        "--hedge",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="while a cluster is suspect (its agent and the leader's own probe fail), start standby "
        "copies of its applications elsewhere at once; they become the placement when the failure "
        "is confirmed after the grace and are removed if the cluster comes back (default: on; an "
        "application opts out with spec.failover.hedge: false)",
    )
    run.add_argument(
        "--hedge-max-suspect",
        type=float,
        default=0.34,
        help="no standby copies while more than this share of the clusters is suspect at once "
        "(that is the controller's partition, not their failure; default %(default)g)",
    )
    run.add_argument(
        "--hedge-share",
        type=float,
        default=0.5,
        help="the standby copies of one batch take at most this share of the fleet's free CPU "
        "(default %(default)g)",
    )
    run.add_argument(
        "--max-version-failures",
        type=int,
        default=MAX_VERSION_FAILURES,
        help="a service of one spec version that failed on this many clusters is not moved again "
        "(a controller.version.failing event names the clusters and the reason; default %(default)s)",
    )
    run.add_argument(
        "--no-rollback",
        dest="rollback",
        action="store_false",
        help="only report a version that failed on --max-version-failures clusters; by default the "
        "leader also stores the last version that did not fail again as the newest one and places "
        "it (one automatic rollback per failing deploy; a controller.version.rolled-back event)",
    )
    run.add_argument("--tick", type=float, default=1.0, help="seconds between detector runs")
    run.add_argument(
        "--progressing-timeout",
        type=float,
        default=PROGRESSING_BACKSTOP,
        help="backstop: seconds a workload may stay Progressing before its service moves "
        "(default %(default)gs; the agent reports Failed earlier, after the workload's "
        "own grace: the Deployment's progressDeadlineSeconds, 600 s by default)",
    )
    run.add_argument("--hysteresis", type=float, default=0.1, help="relative QoS gain needed to move (0..1)")
    run.add_argument(
        "--min-dwell", type=float, default=60.0, help="seconds an app stays put before a QoS move"
    )
    run.add_argument(
        "--stable-seconds",
        type=float,
        default=30.0,
        help="seconds a recovered cluster must stay healthy before apps move back to it",
    )
    run.add_argument("--max-attempts", type=int, default=4, help="playbook attempts per decision")
    run.add_argument(
        "--max-concurrent-runs",
        type=int,
        help="migration playbook runs at once; the rest wait in decision order "
        "(default: one per two CPU cores, at least 1)",
    )
    run.add_argument(
        "--batch-size",
        type=int,
        default=50,
        help="applications one migration run heals (one playbook start-up and one deploy module "
        "process for all, their deploys at once; default %(default)s)",
    )
    run.add_argument(
        "--max-drift-moves-per-minute",
        type=float,
        default=2.0,
        help="QoS-drift moves (e.g. back onto a recovered cluster, after --stable-seconds) "
        "admitted per minute (default %(default)g)",
    )
    run.add_argument(
        "--wait-timeout",
        type=float,
        default=DEFAULT_WAIT_TIMEOUT,
        help="seconds each migration waits for its new workloads to be ready (default %(default)gs, "
        f"sized for real image pulls); a run may take this plus {RUN_OVERHEAD:g}s before it is stopped",
    )
    run.add_argument(
        "--extra-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra variable for every migration run (not for secrets)",
    )
    run.add_argument(
        "--migration-nice",
        type=int,
        default=DEFAULT_MIGRATION_NICE,
        metavar="N",
        help="run every migration process N nice levels below this replica (0..19, default "
        "%(default)s), so a busy host slows playbooks, not Raft heartbeats and elections",
    )
    run.add_argument(
        "--survivability-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="as leader, check N-1 survivability at most every SECONDS when the fleet changed "
        "(a deploy, a cluster loss, a capacity change), off the tick; 0 turns it off (default %(default)g)",
    )
    run.add_argument(
        "--survive-label",
        action="append",
        default=[],
        metavar="KEY",
        help="a cluster label (e.g. site, region; tier) whose every value is also a failure scenario "
        "of the survivability check (repeatable; applications' spec.survive add their own)",
    )
    run.add_argument(
        "--ready-file", help="write {'http': PORT, ...} here once serving (for supervisors and tests)"
    )
    run.set_defaults(func=_run)

    status = sub.add_parser("status", help="show leader, term, commit index, peers, in-flight migrations")
    status.add_argument(
        "--url",
        required=True,
        metavar="URL[,URL...]",
        help="status endpoint(s) of one or more replicas, e.g. http://127.0.0.1:9101",
    )
    status.add_argument("--json", action="store_true", help="print the raw status documents")
    status.add_argument("--timeout", type=float, default=3.0)
    status.set_defaults(func=_status)


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise UserError(f"{flag}: expected a number of seconds > 0, got {value:g}")
    return value


def _at_least_one(value: int, flag: str) -> int:
    if value < 1:
        raise UserError(f"{flag}: expected a count >= 1, got {value}")
    return value


def _pacing_options(args: argparse.Namespace) -> dict[str, Any]:
    """--max-concurrent-runs, --batch-size, --max-drift-moves-per-minute as Config fields."""
    from qonnect.controller.loop import default_concurrency

    runs = default_concurrency() if args.max_concurrent_runs is None else args.max_concurrent_runs
    if runs < 1:
        raise UserError(f"--max-concurrent-runs: expected an integer >= 1, got {runs}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size: expected an integer >= 1, got {args.batch_size}")
    if not args.max_drift_moves_per_minute >= 0:
        raise UserError(
            f"--max-drift-moves-per-minute: expected a number >= 0, got {args.max_drift_moves_per_minute:g}"
        )
    return {
        "max_concurrent_runs": runs,
        "batch_size": args.batch_size,
        "max_drift_moves_per_minute": args.max_drift_moves_per_minute,
    }


def _non_negative(value: float, flag: str) -> float:
    if not value >= 0 or value == float("inf"):
        raise UserError(f"{flag}: expected a number of seconds >= 0, got {value:g}")
    return value


def _share(value: float, flag: str) -> float:
    if not 0 < value <= 1:
        raise UserError(f"{flag}: expected a share in (0, 1], got {value:g}")
    return value


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UserError(f"--token-file {path}: cannot read ({exc.strerror})") from None
    if not token:
        raise UserError(f"--token-file {path}: the file is empty; expected a KB bearer token")
    return token


def _run(args: argparse.Namespace) -> int:
    """One replica: its Config from the flags (all checked before anything starts), then the
    controller, serving until SIGTERM or SIGINT."""
    # first, before any flag is checked: importing the loop refuses an untested pysyncobj (raft.py)
    from qonnect.controller.loop import Controller

    cfg = _config(args)
    logging.getLogger("qonnect").setLevel(min(logging.getLogger().level, logging.INFO))
    controller = Controller(cfg, planner=_planner(cfg))
    _start_status(args, controller, cfg.http_host)
    _stop_on_signals(controller)
    controller.run_forever()
    return 0


def _config(args: argparse.Namespace) -> Config:
    """The replica's Config; the first bad flag, in this order, is the UserError reported."""
    from qonnect.controller.loop import Config

    secret, peers, http_host, http_port = _raft_and_http(args)
    if not args.kb.startswith(("http://", "https://")):
        raise UserError(f"--kb: expected an http:// or https:// URL, got {args.kb!r}")
    timeout = _heartbeat_timeout(args)
    if not 0 <= args.hysteresis < 1:
        raise UserError(f"--hysteresis: expected a fraction in [0, 1), got {args.hysteresis:g}")
    if args.max_attempts < 1:
        raise UserError(f"--max-attempts: expected an integer >= 1, got {args.max_attempts}")
    pacing = _pacing_options(args)
    extravars = _extra_vars(args.extra_var)
    wait_timeout = _positive(args.wait_timeout, "--wait-timeout")
    _set_migration_nice(args.migration_nice)
    playbook = _playbook(args.playbook)
    data_dir = args.data_dir or f"qonnect-controller-{args.id}"
    settings = _settings(args, timeout)
    return Config(
        self_addr=args.self_addr,
        peers=peers,
        kb_url=args.kb,
        token=_read_token(args.token_file),
        token_file=os.path.abspath(args.token_file),
        secret=secret,
        data_dir=os.path.abspath(data_dir),
        playbook=os.path.abspath(playbook),
        http_host=http_host,
        http_port=int(http_port),
        tick=_positive(args.tick, "--tick"),
        max_attempts=args.max_attempts,
        rollback=args.rollback,
        survivability_every=_non_negative(args.survivability_every, "--survivability-every"),
        survive_labels=tuple(k.strip() for k in args.survive_label if k.strip()),
        **pacing,
        wait_timeout=wait_timeout,
        run_timeout=run_timeout_for(wait_timeout),
        settings=settings,
        extravars=extravars,
        name=args.id,
    )


def _raft_and_http(args: argparse.Namespace) -> tuple[str, list[str], str, str]:
    """The Raft secret, the peers' addresses (--self checked too) and the status endpoint's host
    and port (digits); what raft_config refuses is reported as a UserError without traceback."""
    from qonnect.controller.raft_config import RaftConfigError, check_address, read_secret

    try:
        secret = read_secret(args.raft_secret_file)
        check_address(args.self_addr, "--self")
        peers = [check_address(p.strip(), "--peers") for p in args.peers.split(",") if p.strip()]
        http_host, _colon, http_port = args.http.rpartition(":")
        if not http_host or not http_port.isdigit():
            raise RaftConfigError(f"--http: expected HOST:PORT, got {args.http!r}")
    except RaftConfigError as exc:
        raise UserError(str(exc)) from None
    return secret, peers, http_host, http_port


def _heartbeat_timeout(args: argparse.Namespace) -> float:
    """--heartbeat-timeout, by default three --agent-interval (both checked)."""
    interval = _positive(args.agent_interval, "--agent-interval")
    return (
        _positive(args.heartbeat_timeout, "--heartbeat-timeout") if args.heartbeat_timeout else 3 * interval
    )


def _extra_vars(items: list[str]) -> dict[str, str]:
    """--extra-var KEY=VALUE pairs; a variable the controller sets itself is refused (it would
    silently override the controller's own)."""
    extravars = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UserError(f"--extra-var: expected KEY=VALUE with KEY an identifier, got {item!r}")
        if key in OWN_VARS:
            raise UserError(f"--extra-var: {key} is set by the controller itself ({OWN_VARS[key]})")
        extravars[key] = value
    return extravars


def _set_migration_nice(nice: int) -> None:
    """Check --migration-nice and set it for every migration process this replica starts."""
    if not 0 <= nice <= MAX_NICE:
        raise UserError(f"--migration-nice: expected an integer in 0..{MAX_NICE}, got {nice}")
    set_migration_nice(nice)


def _playbook(path: str | None) -> str:
    """--playbook, by default the installed collection's migrate.yml; it must exist."""
    from qonnect.controller.executor import default_playbook

    playbook = path or default_playbook()
    if not Path(playbook).is_file():
        raise UserError(f"--playbook: {playbook} does not exist")
    return playbook


def _settings(args: argparse.Namespace, timeout: float) -> Settings:
    """The detector's Settings (its flags checked in the order of the fields)."""
    from qonnect.controller.detector import Settings

    return Settings(
        heartbeat_timeout=timeout,
        progressing_timeout=_positive(args.progressing_timeout, "--progressing-timeout"),
        stable_seconds=args.stable_seconds,
        min_dwell=args.min_dwell,
        hysteresis=args.hysteresis,
        node_grace=max(timeout, 10.0),
        cluster_grace=_non_negative(args.cluster_grace, "--cluster-grace"),
        max_version_failures=_at_least_one(args.max_version_failures, "--max-version-failures"),
        hedge=args.hedge,
        hedge_max_suspect=_share(args.hedge_max_suspect, "--hedge-max-suspect"),
        hedge_share=_share(args.hedge_share, "--hedge-share"),
    )


def _planner(cfg: Config) -> Planner | None:
    """The placement engine's batch planner with the default scorer and the configured
    hysteresis (None when the engine is not installed)."""
    from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER

    from qonnect.controller.replan import engine_planner

    return engine_planner(DEFAULT_SCORER, cfg.settings.hysteresis)


def _start_status(args: argparse.Namespace, controller: Controller, http_host: str) -> None:
    """Start the status endpoint, log where it is and write --ready-file."""
    port = controller.start_http()
    log.warning("replica %s: raft %s, status http://%s:%d/status", args.id, args.self_addr, http_host, port)
    if args.ready_file:  # atomically: a supervisor polling for it never reads it half-written
        tmp = Path(f"{args.ready_file}.tmp")
        tmp.write_text(json.dumps({"http": port, "pid": os.getpid(), "id": args.id}))
        os.replace(tmp, args.ready_file)


def _stop_on_signals(controller: Controller) -> None:
    """SIGTERM and SIGINT stop the controller: run_forever then returns (exit status 0)."""

    def stop(signum: int, frame: Any) -> None:
        controller.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def fetch_status(url: str, timeout: float) -> dict[str, Any] | str:
    """One replica's /status document, or why it could not be read."""
    target = url.rstrip("/") + "/status"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))


def _status(args: argparse.Namespace) -> int:
    from qonnect.controller.status import render

    urls = [u.strip() for u in args.url.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--url: expected http://HOST:PORT, got {url!r}")
    statuses = {url: fetch_status(url, args.timeout) for url in urls}
    if args.json:
        print(json.dumps(statuses, indent=2, default=str))
    else:
        sys.stdout.write(render(statuses))
    return 0 if any(isinstance(s, dict) for s in statuses.values()) else 1
