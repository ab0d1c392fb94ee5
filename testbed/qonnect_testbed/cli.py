"""``qonnect testbed``: start, inspect, break and repair a federation of emulated clusters.

``up`` starts ``serve`` as a detached background process (pid and log in DIR) and returns when
every cluster answers; the other sub-commands talk to that process's control endpoint, whose
address and token are in DIR/testbed.json (mode 0600).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import keys

from qonnect_testbed import federation, fleet
from qonnect_testbed.errors import TestbedError
from qonnect_testbed.federation import FEDERATION_FILE, LOG_FILE, STATE_FILE

LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "testbed",
        help="emulated Kubernetes clusters for tests and demos",
        description="Start, inspect, break and repair a federation of "
        "emulated Kubernetes clusters (see docs/testbed.md).",
    )
    sub = parser.add_subparsers(dest="testbed_command", metavar="ACTION")
    sub.required = True

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--dir", required=True, type=Path, help="directory of the testbed's files")
        return p

    def fleet_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--profile", default="paper", help="built-in profile (paper, scale) or a profile file")
        p.add_argument("--clusters", type=_positive_int, help="number of clusters (rescales the profile)")
        p.add_argument("--nodes", type=_positive_int, help="nodes per cluster (generated profiles only)")
        p.add_argument(
            "--start-delay",
            type=_non_negative,
            default=1.0,
            metavar="S",
            help="seconds from binding a pod to Running and Ready (default 1)",
        )
        p.add_argument(
            "--heartbeat",
            type=_positive_float,
            default=10.0,
            metavar="S",
            help="node heartbeat interval in seconds (default 10)",
        )
        p.add_argument(
            "--engine",
            choices=("emulator", "kube"),
            default="emulator",
            help="emulator: emulated clusters in one process (default, fast); kube: real "
            "kube-apiserver, controller-manager, scheduler and etcd per cluster "
            "with simulated kubelets (built by 'make kube')",
        )
        p.add_argument(
            "--node-monitor-grace-period",
            type=_non_negative,
            metavar="S",
            help="seconds without a node heartbeat before NotReady (kube default 40)",
        )
        p.add_argument(
            "--default-unreachable-toleration-seconds",
            type=_non_negative_int,
            metavar="S",
            help="eviction delay from an unreachable node (kube default 300)",
        )
        p.add_argument(
            "--default-not-ready-toleration-seconds",
            type=_non_negative_int,
            metavar="S",
            help="eviction delay from a NotReady node (kube default 300)",
        )

    up = with_dir(sub.add_parser("up", help="start a federation in the background"))
    fleet_options(up)
    up.add_argument(
        "--timeout",
        type=_positive_float,
        help="seconds to wait for all clusters (default 120; 300 with --engine kube)",
    )
    up.set_defaults(func=cmd_up)

    serve = with_dir(sub.add_parser("serve", help="run a federation in the foreground"))
    fleet_options(serve)
    serve.set_defaults(func=cmd_serve)

    with_dir(sub.add_parser("down", help="stop the federation")).set_defaults(func=cmd_down)

    status = with_dir(sub.add_parser("status", help="clusters up/failed, nodes, pods"))
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)

    for name, text in (
        ("fail", "make a cluster's API refuse connections"),
        ("recover", "serve a failed cluster again, state kept"),
    ):
        p = with_dir(sub.add_parser(name, help=text))
        p.add_argument("cluster")
        p.set_defaults(func=cmd_cluster, action=name)

    for name, text in (
        ("node-down", "a node stops posting status: NotReady, pods evicted"),
        ("node-up", "a node is Ready again"),
    ):
        p = with_dir(sub.add_parser(name, help=text))
        p.add_argument("cluster")
        p.add_argument("node")
        p.set_defaults(func=cmd_node, action="down" if name == "node-down" else "up")

    setp = with_dir(sub.add_parser("set", help="change node labels and metrics as an operator would"))
    setp.add_argument("cluster")
    setp.add_argument("--node", help="only this node (default: every node of the cluster)")
    setp.add_argument("--price", type=_non_negative, help="EUR/h (label qonnect.io/price-eur-h)")
    setp.add_argument("--energy", type=_non_negative, help="kWh (label qonnect.io/energy-kwh)")
    setp.add_argument("--bandwidth", type=_non_negative, help="Gbit/s (label qonnect.io/bandwidth-gbps)")
    setp.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a label (KEY- removes it); repeatable",
    )
    setp.set_defaults(func=cmd_set)

    binaries = sub.add_parser(
        "binaries", help="the real engine's Kubernetes binaries: build them once if missing, print where"
    )
    binaries.set_defaults(func=cmd_binaries)


# errors the product's CLI (qonnect.cli) prints without a traceback for this component
USER_ERRORS = (TestbedError,)


def main(argv: list[str] | None = None) -> int:
    """``python -m qonnect_testbed ACTION ...``: the testbed's commands without the product's CLI
    (the detached ``serve`` process runs this way)."""
    parser = argparse.ArgumentParser(prog="qonnect")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["testbed", *(sys.argv[1:] if argv is None else argv)])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except TestbedError as exc:
        print(f"qonnect testbed {args.testbed_command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _number(kind: type, test: Any, expected: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, lambda v: v > 0, "a positive integer")
_positive_float = _number(float, lambda v: v > 0, "a positive number")
_non_negative = _number(float, lambda v: v >= 0, "a non-negative number")
_non_negative_int = _number(int, lambda v: v >= 0, "a non-negative integer")
TIMING_FLAGS = (
    "node_monitor_grace_period",
    "default_unreachable_toleration_seconds",
    "default_not_ready_toleration_seconds",
)


# --------------------------------------------------------------------------- helpers


def _expand(args: argparse.Namespace) -> fleet.Fleet:
    try:
        return fleet.expand(fleet.load(args.profile), clusters=args.clusters, nodes=args.nodes)
    except fleet.ProfileError as exc:
        raise TestbedError(str(exc)) from None


def _state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TestbedError(
            f"no testbed is running in {directory} (start one with 'qonnect testbed up')"
        ) from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: unreadable testbed state: {exc}") from None
    if not _alive(int(state.get("pid", 0))):
        raise TestbedError(
            f"the testbed in {directory} is not running (pid {state.get('pid')} is gone); "
            f"see {directory / LOG_FILE}"
        )
    return state


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (e.g. of a test that started it) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def control(
    directory: Path, method: str, path: str, body: dict | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """Call the running testbed's control endpoint; errors become TestbedError."""
    state = _state(directory)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        state["admin_url"] + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {state['admin_token']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise TestbedError(str(message)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise TestbedError(f"cannot reach the testbed control endpoint: {exc}") from None


def _answers(cluster: dict[str, Any], ca_file: str) -> bool:
    """Whether the cluster's API answers /healthz over verified TLS with its token."""
    token = _token(Path(cluster["kubeconfig"]))
    context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(
        cluster["server"] + "/healthz", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _token(path: Path) -> str:
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc["users"][0]["user"]["token"]


# --------------------------------------------------------------------------- commands


def cmd_serve(args: argparse.Namespace) -> int:
    if args.engine == "kube":
        from qonnect_testbed.kube.serve import serve_kube

        return serve_kube(args, _expand(args))
    from qonnect_testbed import server  # imports aiohttp and the API server only when serving

    spec = _expand(args)
    logging.getLogger("qonnect_testbed").setLevel(logging.INFO)
    asyncio.run(
        server.serve(
            spec,
            args.dir.resolve(),
            start_delay=args.start_delay,
            heartbeat_seconds=args.heartbeat,
            **{name: getattr(args, name, None) for name in TIMING_FLAGS},
        )
    )
    return 0


def cmd_up(args: argparse.Namespace) -> int:  # noqa: C901 - over the budget before it was set; split when next changed
    directory = args.dir.resolve()
    spec = _expand(args)  # validate the profile before starting anything
    if (directory / STATE_FILE).exists():
        try:
            state = _state(directory)
        except TestbedError:
            (directory / STATE_FILE).unlink()
        else:
            raise TestbedError(
                f"a testbed is already running in {directory} (pid {state['pid']}); "
                "stop it with 'qonnect testbed down'"
            )
    directory.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or (300.0 if args.engine == "kube" else 120.0)
    if args.engine == "kube":  # build (once, cached) before the clock starts
        from qonnect_testbed.kube.binaries import BinariesError, ensure_binaries

        try:
            ensure_binaries()
        except BinariesError as exc:
            raise TestbedError(str(exc)) from None
    command = [
        sys.executable,
        "-m",
        "qonnect_testbed",
        "serve",
        "--dir",
        str(directory),
        "--profile",
        args.profile,
        "--start-delay",
        str(args.start_delay),
        "--heartbeat",
        str(args.heartbeat),
        "--engine",
        args.engine,
    ]
    for name in TIMING_FLAGS:
        if getattr(args, name) is not None:
            command += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.clusters:
        command += ["--clusters", str(args.clusters)]
    if args.nodes:
        command += ["--nodes", str(args.nodes)]
    log_path = directory / LOG_FILE
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise TestbedError(
                f"the testbed process exited with code {proc.returncode}; log {log_path}:\n{tail}"
            )
        if (directory / STATE_FILE).exists():
            break
        time.sleep(0.1)
    else:
        proc.terminate()
        raise TestbedError(f"the testbed did not start within {timeout:g} s; see {log_path}")
    doc = federation.read(directory / FEDERATION_FILE)
    waiting = list(doc["clusters"])
    while waiting and time.monotonic() < deadline:
        waiting = [c for c in waiting if not _answers(c, doc["ca_file"])]
        if waiting:
            time.sleep(0.2)
    if waiting:
        raise TestbedError(
            f"clusters not answering after {timeout:g} s: "
            f"{', '.join(c['name'] for c in waiting)}; see {log_path}"
        )
    print(f"testbed {spec.name}: {len(doc['clusters'])} clusters up (pid {proc.pid})")
    print(f"federation: {directory / FEDERATION_FILE}")
    print(f"kubeconfigs: {directory / 'kubeconfigs'}")
    return 0


def cmd_binaries(args: argparse.Namespace) -> int:
    from qonnect_testbed.kube.binaries import BinariesError, ensure_binaries

    try:
        print(ensure_binaries(), flush=True)
    except BinariesError as exc:
        raise TestbedError(str(exc)) from None
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    directory = args.dir.resolve()
    try:
        state = _state(directory)
    except TestbedError as exc:
        (directory / STATE_FILE).unlink(missing_ok=True)
        print(f"nothing to stop: {exc}")
        return 0
    pid = int(state["pid"])
    try:
        control(directory, "POST", "/shutdown", timeout=10)
    except TestbedError:
        if _is_testbed(pid, directory):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid) and _is_testbed(pid, directory):
        os.kill(pid, signal.SIGKILL)
    (directory / STATE_FILE).unlink(missing_ok=True)
    print(f"testbed in {directory} stopped")
    return 0


def _is_testbed(pid: int, directory: Path) -> bool:
    """Whether pid is this directory's testbed process (guards against a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in argv and str(directory).encode() in argv


def cmd_status(args: argparse.Namespace) -> int:
    status = control(args.dir.resolve(), "GET", "/status")
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"{'CLUSTER':<16}{'TIER':<8}{'STATE':<8}{'NODES':>7}{'READY':>7}{'PODS':>7}{'RUNNING':>9}  SERVER")
    for c in status["clusters"]:
        print(
            f"{c['name']:<16}{c['tier']:<8}{'up' if c['up'] else 'failed':<8}{c['nodes']:>7}"
            f"{c['nodes_ready']:>7}{c['pods']:>7}{c['pods_running']:>9}  {c['server']}"
        )
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    control(args.dir.resolve(), "POST", f"/clusters/{args.cluster}/{args.action}")
    print(
        f"cluster {args.cluster}: {'failed (connections refused)' if args.action == 'fail' else 'recovered'}"
    )
    return 0


def cmd_node(args: argparse.Namespace) -> int:
    control(args.dir.resolve(), "POST", f"/clusters/{args.cluster}/nodes/{args.node}/{args.action}")
    print(f"node {args.node} of {args.cluster}: {'NotReady' if args.action == 'down' else 'Ready'}")
    return 0


def parse_labels(items: list[str]) -> dict[str, str | None]:
    """KEY=VALUE sets, KEY- removes; invalid keys or values are user errors."""
    labels: dict[str, str | None] = {}
    for item in items:
        if item.endswith("-") and "=" not in item:
            key, value = item[:-1], None
        elif "=" in item:
            key, value = item.split("=", 1)
        else:
            raise TestbedError(f"--label {item!r}: expected KEY=VALUE or KEY-")
        if not LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
            raise TestbedError(f"--label {item!r}: {key!r} is not a valid label key")
        if value is not None and (not LABEL_VALUE.match(value) or len(value) > 63):
            raise TestbedError(
                f"--label {item!r}: {value!r} is not a valid label value "
                "(up to 63 letters, digits, '-', '_', '.')"
            )
        labels[key] = value
    return labels


def cmd_set(args: argparse.Namespace) -> int:
    labels = parse_labels(args.label)
    for value, key in (
        (args.price, keys.PRICE_LABEL),
        (args.energy, keys.ENERGY_LABEL),
        (args.bandwidth, keys.BANDWIDTH_LABEL),
    ):
        if value is not None:
            labels[key] = fleet.label_number(value)
    if not labels:
        raise TestbedError("set: nothing to change; give --price, --energy, --bandwidth or --label")
    result = control(
        args.dir.resolve(), "POST", f"/clusters/{args.cluster}/labels", {"labels": labels, "node": args.node}
    )
    print(f"{args.cluster}: updated {', '.join(result['nodes'])}")
    return 0
