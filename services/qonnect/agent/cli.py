"""``qonnect agent``: run the Resource Agent for one cluster."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from qonnect.cli import UserError

if TYPE_CHECKING:
    from qonnect.agent.runner import Agent

DEFAULT_INTERVAL = 2.0  # the controller declares a cluster down after 3 missed intervals


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "agent",
        help="run the Resource Agent of one cluster",
        description="Report one cluster's nodes, managed workloads and latencies to the KB "
        "every interval; buffer reports while the KB is unreachable.",
    )
    p.add_argument("--cluster", required=True, help="cluster name as registered in the KB")
    p.add_argument("--kubeconfig", required=True, help="kubeconfig file of this cluster")
    p.add_argument("--kb", required=True, metavar="URL", help="KB base URL, e.g. http://host:8080")
    p.add_argument("--token-file", required=True, help="file holding the agent's KB bearer token")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between reports")
    p.add_argument("--source-address", help="local address to measure latencies from")
    p.add_argument("--peers", default="", help="peer clusters to measure: name=https://host:port,...")
    p.add_argument("--state-dir", help="directory for the sequence number and the outbox")
    p.add_argument("--kb-ca", help="CA bundle to verify an https KB")
    p.add_argument(
        "--not-ready-timeout",
        type=float,
        default=600.0,
        help="seconds a workload may stay not ready (a pod failing to pull, start or be scheduled) "
        "before it is reported Failed, unless the workload sets its own grace (annotation "
        "qonnect.io/failure-grace-seconds, or a Deployment's progressDeadlineSeconds); default 600, "
        "Kubernetes' default progress deadline, so that real image pulls and rescheduling fit",
    )
    p.add_argument("--outbox-size", type=int, default=120, help="reports kept while the KB is unreachable")
    p.set_defaults(func=run)


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise UserError(f"--token-file {path}: cannot read it ({exc.strerror})") from None
    if not token:
        raise UserError(f"--token-file {path}: the file is empty, expected a KB bearer token")
    return token


def _check_args(args: argparse.Namespace) -> None:
    if not args.cluster.strip():
        raise UserError("--cluster: expected a non-empty cluster name")
    if not (args.interval > 0):
        raise UserError(f"--interval: expected a number of seconds > 0, got {args.interval:g}")
    if not (args.not_ready_timeout > 0):
        raise UserError("--not-ready-timeout: expected a number of seconds > 0")
    if args.outbox_size < 2:
        raise UserError(f"--outbox-size: expected at least 2, got {args.outbox_size}")
    if not os.access(args.kubeconfig, os.R_OK):
        raise UserError(f"--kubeconfig {args.kubeconfig}: file missing or not readable")
    if not args.kb.startswith(("http://", "https://")):
        raise UserError(f"--kb: expected an http:// or https:// URL, got {args.kb!r}")
    if args.kb_ca and not os.access(args.kb_ca, os.R_OK):
        raise UserError(f"--kb-ca {args.kb_ca}: file missing or not readable")
    if args.source_address:
        try:
            ipaddress.ip_address(args.source_address)
        except ValueError:
            raise UserError(
                f"--source-address: expected an IP address, got {args.source_address!r}"
            ) from None


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT, which may arrive even while it is starting."""
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _build(args, stop).run()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


def _build(args: argparse.Namespace, stop: threading.Event) -> Agent:
    """The agent described by the arguments; UserError for anything the user must fix."""
    _check_args(args)  # before the slow imports, so a supervisor sees a bad start at once
    token = _read_token(args.token_file)
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

    from qonnect.agent.buffer import Outbox
    from qonnect.agent.collector import Collector
    from qonnect.agent.latency import parse_peers
    from qonnect.agent.runner import Agent
    from qonnect.agent.sequence import Sequence

    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if "kb" in peers:
        raise UserError("--peers: 'kb' is reserved for the latency to the KB; rename that peer")
    state_dir = Path(args.state_dir) if args.state_dir else None
    if state_dir is not None:
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise UserError(f"--state-dir {state_dir}: cannot create it ({exc.strerror})") from None
    try:
        kb = KBClient(args.kb, token, ca_path=args.kb_ca, timeout=max(2.0, min(10.0, args.interval)))
    except KBError as exc:
        raise UserError(f"--kb: {exc.message}") from None
    return Agent(
        cluster=args.cluster,
        collect=Collector(args.kubeconfig, not_ready_timeout=args.not_ready_timeout).collect,
        kb=kb,
        outbox=Outbox(args.outbox_size, state_dir / "outbox.json" if state_dir else None),
        sequence=Sequence(state_dir / "seq" if state_dir else None),
        interval=args.interval,
        latency_targets={"kb": args.kb, **peers},
        source_address=args.source_address,
        ca_paths={"kb": args.kb_ca} if args.kb_ca else None,
        stop_event=stop,
    )
