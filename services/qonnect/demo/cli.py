"""``qonnect demo up|down``: start the whole system on the testbed and play QONNECT's evaluation.

``up`` starts the testbed (paper profile; emulated clusters, or with ``--engine kube`` real
control planes), the KB, tokens, one agent per cluster and three
controller replicas, registers the clusters, plays the five steps, prints a summary table and
leaves everything running; it exits 1 if any step missed its expected state. ``down`` stops
everything ``up`` recorded in the demo directory.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any


def default_dir() -> Path:
    """Demo state (tokens, keys, kubeconfigs, the KB database) lives outside any checkout, so a
    collection build from the checkout can never pack it: $XDG_STATE_HOME/qonnect/demo."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "qonnect" / "demo"


DEFAULT_DIR = default_dir()


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="the end-to-end demo on the testbed (make demo)", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="demo_command", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="start everything and play the five steps")
    up.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help="directory for state, logs, tokens (default %(default)s)",
    )
    up.add_argument(
        "--engine",
        choices=("emulator", "kube"),
        default="emulator",
        help="emulator: nine emulated clusters in one process (default, starts in seconds); kube: "
        "nine real control planes (~4.2 GiB, about a minute to start; binaries from make kube)",
    )
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop everything the demo started")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the demo's directory")
    down.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    from qonnect.cli import UserError
    from qonnect.demo.progress import Result, fail, header, say, table
    from qonnect.demo.stack import Stack
    from qonnect.demo.steps import STEPS, Story

    args.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stack = Stack(args.dir, args.engine)
    if stack.running():
        raise UserError(
            f"--dir {args.dir}: a demo is already running there "
            f"({', '.join(stack.running())}); stop it with 'qonnect demo down --dir {args.dir}'"
        )
    stack.reset()
    header("setting up the federation")
    t0 = time.monotonic()
    try:
        stack.start_testbed()
        stack.start_kb()
        stack.register_clusters()
        stack.start_agents()
        stack.start_controllers()
    except Exception as exc:  # StepFailed, KBError, OSError...: say what and where the logs are
        fail(f"set-up failed: {exc}")
        say(f"logs: {stack.logs}; stop what started with: qonnect demo down --dir {args.dir}")
        return 1
    results = [
        Result(
            "0 set up",
            True,
            f"testbed ({stack.engine.name}), KB, {len(stack.federation['clusters'])} agents, "
            "3 controller replicas, clusters registered",
            time.monotonic() - t0,
        )
    ]
    story = Story(stack)
    for name, step in STEPS:
        header(f"step {name}")
        started = time.monotonic()
        try:
            what, ok = step(story), True
        except Exception as exc:  # StepFailed, or the KB/testbed refusing: the step failed, go on
            what, ok = f"did not reach the expected state: {exc}", False
            fail(f"step {name}: {exc}")
        results.append(Result(name, ok, what.splitlines()[0][:300], time.monotonic() - started))
        say(f"  -> step {'done' if ok else 'FAILED'} in {results[-1].seconds:.1f}s")
    header("summary")
    say(table(results))
    _explore(stack, args.dir)
    return 0 if all(r.ok for r in results) else 1


def _explore(stack: Any, directory: Path) -> None:
    from qonnect.demo.progress import say

    kb, tokens = stack.state["kb_url"], stack.tokens
    controllers = ",".join(r["http"] for r in stack.state["replicas"] if r.get("http"))
    say()
    say("The federation keeps running. Explore it:")
    say(f"  qonnect status --kb {kb} --token-file {tokens / 'reader.token'} --controller {controllers}")
    say(f"  qonnect controller status --url {controllers}")
    say(f"  status page: {kb}/ui  (reader token in {tokens / 'reader.token'})")
    say(
        f"  kubeconfigs: {stack.testbed_dir / 'kubeconfigs'}/<cluster>.yaml  (e.g. kubectl --kubeconfig "
        f"{stack.testbed_dir / 'kubeconfigs' / 'cloud-1.yaml'} get pods -A)"
    )
    say(f"  logs: {stack.logs}")
    say(f"Stop it with: make demo-down  (or qonnect demo down --dir {directory})")


def _down(args: argparse.Namespace) -> int:
    from qonnect.cli import UserError
    from qonnect.demo.stack import Stack

    if not (args.dir / "demo.json").exists():
        raise UserError(f"--dir {args.dir}: no demo state here (demo.json missing); nothing to stop")
    stopped = Stack(args.dir).down()
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0
