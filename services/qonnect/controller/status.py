"""Operator view of a replica: /healthz, /metrics (Prometheus text) and /status (JSON), plus the
text rendering used by ``qonnect controller status``.

The HTTP server is the standard library's: it serves a few small documents, read-only.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Metrics:
    """Counters and summaries of one replica (thread-safe, process-local)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions: dict[str, int] = {}  # kind -> decisions this replica committed as leader
        self.migrations: dict[str, int] = {}  # result -> attempts this replica ran
        self.summaries: dict[str, list[float]] = {
            "detection_seconds": [0, 0.0, 0.0],
            "recovery_seconds": [0, 0.0, 0.0],
        }

    def count_decision(self, kind: str) -> None:
        with self._lock:
            self.decisions[kind] = self.decisions.get(kind, 0) + 1

    def count_migration(self, result: str) -> None:
        with self._lock:
            self.migrations[result] = self.migrations.get(result, 0) + 1

    def observe(self, name: str, seconds: float) -> None:
        """Add one sample to a summary: [count, sum, last]."""
        with self._lock:
            entry = self.summaries[name]
            entry[0] += 1
            entry[1] += seconds
            entry[2] = seconds

    def render(self, status: dict[str, Any]) -> str:
        """Prometheus text exposition format."""
        out = [
            "# HELP qonnect_controller_is_leader 1 if this replica is the Raft leader.",
            "# TYPE qonnect_controller_is_leader gauge",
            f"qonnect_controller_is_leader {1 if status['is_leader'] else 0}",
            "# HELP qonnect_controller_term Current Raft term.",
            "# TYPE qonnect_controller_term gauge",
            f"qonnect_controller_term {status['term']}",
            "# HELP qonnect_controller_commit_index Raft commit index.",
            "# TYPE qonnect_controller_commit_index gauge",
            f"qonnect_controller_commit_index {status['commit_index']}",
            "# HELP qonnect_controller_has_quorum 1 if this replica reaches a majority.",
            "# TYPE qonnect_controller_has_quorum gauge",
            f"qonnect_controller_has_quorum {1 if status['has_quorum'] else 0}",
            "# HELP qonnect_controller_inflight_migrations Decisions not yet ended (replicated state).",
            "# TYPE qonnect_controller_inflight_migrations gauge",
            f"qonnect_controller_inflight_migrations {len(status['inflight'])}",
            "# HELP qonnect_controller_log_decisions_total Decisions in the replicated log, by outcome.",
            "# TYPE qonnect_controller_log_decisions_total counter",
        ]
        for key, value in sorted(status["log_counters"].items()):
            out.append(f'qonnect_controller_log_decisions_total{{outcome="{key}"}} {value}')
        out += [
            "# HELP qonnect_controller_drift_judgements_total Applications re-placed to judge QoS drift"
            " (only after a change the placement reads).",
            "# TYPE qonnect_controller_drift_judgements_total counter",
            f"qonnect_controller_drift_judgements_total {status.get('drift_judgements', 0)}",
            "# HELP qonnect_controller_drift_carried_total Drift verdicts kept through a fleet change"
            " the engine showed cannot move their plans.",
            "# TYPE qonnect_controller_drift_carried_total counter",
            f"qonnect_controller_drift_carried_total {status.get('drift_carried', 0)}",
        ]
        with self._lock:
            out += [
                "# HELP qonnect_controller_decisions_total Decisions committed by this replica as leader.",
                "# TYPE qonnect_controller_decisions_total counter",
            ]
            out += [
                f'qonnect_controller_decisions_total{{kind="{k}"}} {v}'
                for k, v in sorted(self.decisions.items())
            ]
            out += [
                "# HELP qonnect_controller_migrations_total Migration attempts run by this replica.",
                "# TYPE qonnect_controller_migrations_total counter",
            ]
            out += [
                f'qonnect_controller_migrations_total{{result="{k}"}} {v}'
                for k, v in sorted(self.migrations.items())
            ]
            for name, (count, total, last) in self.summaries.items():
                help_text = (
                    "problem start to committed decision"
                    if name.startswith("detection")
                    else "problem start to successful migration"
                )
                out += [
                    f"# HELP qonnect_controller_{name} Seconds from {help_text}.",
                    f"# TYPE qonnect_controller_{name} summary",
                    f"qonnect_controller_{name}_count {count}",
                    f"qonnect_controller_{name}_sum {total:.3f}",
                    f"qonnect_controller_{name}_last {last:.3f}",
                ]
        return "\n".join(out) + "\n"


class StatusServer:
    """Serves /healthz, /metrics and /status from a callable producing the status dict."""

    def __init__(self, host: str, port: int, status: Callable[[], dict[str, Any]], metrics: Metrics) -> None:
        get_status, get_metrics = status, metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    st = get_status()
                    self._send(
                        200,
                        "application/json",
                        json.dumps(
                            {"ok": True, "node": st["node"], "state": st["state"], "leader": st["leader"]}
                        ),
                    )
                elif path == "/metrics":
                    self._send(200, "text/plain; version=0.0.4", get_metrics.render(get_status()))
                elif path == "/status":
                    self._send(200, "application/json", json.dumps(get_status(), default=str))
                else:
                    self._send(404, "application/json", json.dumps({"detail": f"no such path {path}"}))

            def _send(self, code: int, ctype: str, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: scraped every few seconds
                pass

            def handle(self) -> None:
                """A client that gave up (timed out) is normal, not a traceback in the log."""
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    self.close_connection = True

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                """A client that went away is not worth a traceback; anything else is."""
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, TimeoutError)):
                    super().handle_error(request, client_address)

        self.server = Server((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="status-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def survivability_lines(doc: dict[str, Any] | None, indent: str = "") -> list[str]:
    """The leader's N-1 survivability report (controller/survival.py) as text: the verdict,
    each application that would not be re-placed (scenario and shortfall), the first shortfall
    and the least spare capacity per tier; [] when the document has none (an older replica)."""
    if not isinstance(doc, dict):
        return []
    if doc.get("state") != "computed":
        return [f"{indent}survivability: {doc.get('state', 'unknown')}"]
    apps = doc.get("applications") or {}
    bad = doc.get("not_survivable") or []
    head = "yes" if doc.get("survivable") else f"NO ({len(bad)} of {len(apps)} application(s))"
    when = time.strftime("%H:%M:%S", time.localtime(doc.get("computed_at") or 0))
    lines = [
        f"{indent}survivability (N-1): {head}; {doc.get('scenarios', 0)} scenario(s), "
        f"computed {when} in {float(doc.get('seconds') or 0) * 1000:.0f} ms"
    ]
    for name in bad:
        for v in apps.get(name, {}).get("violations", [])[:3]:
            lines.append(f"{indent}  {name}: not if {v['scenario']}: {v['shortfall']}")
    first = doc.get("first_shortfall")
    if first:
        lines.append(
            f"{indent}  first shortfall: {first['scenario']}: {first['application']}: {first['text']}"
        )
    for tier, free in sorted((doc.get("spare") or {}).items()):
        lines.append(
            f"{indent}  least spare in {tier}: {free.get('cpu_text', '-')} ({free.get('cpu_scenario', '-')}), "
            f"{free.get('memory_text', '-')} ({free.get('memory_scenario', '-')})"
        )
    return lines


def render(statuses: dict[str, dict[str, Any] | str]) -> str:
    """Human text for ``qonnect controller status``: one block per replica asked."""
    lines: list[str] = []
    for url, st in statuses.items():
        if isinstance(st, str):
            lines += [f"{url}: UNREACHABLE ({st})", ""]
            continue
        role = "LEADER" if st["is_leader"] else st["state"].upper()
        lines.append(
            f"{st.get('name', st['node'])} raft {st['node']} ({url}): {role}  term {st['term']}  "
            f"commit index {st['commit_index']}"
            f"  applied {st['last_applied']}"
        )
        lines.append(f"  leader: {st['leader'] or 'none'}   quorum: {'yes' if st['has_quorum'] else 'NO'}")
        peers = ", ".join(
            f"{p} {'reachable' if ok else 'UNREACHABLE'}" for p, ok in sorted(st["peers"].items())
        )
        lines.append(f"  peers: {peers or 'none'}")
        lines.append(f"  kb: {st['kb']}")
        lines.append(f"  activity: {st['why']}")
        if st["inflight"]:
            lines.append("  in-flight migrations:")
            for d in st["inflight"]:
                lines.append(
                    f"    {d['id']} {d['app']} {d['status']} attempt {d['attempts']} owner "
                    f"{d['owner'] or '-'}: {d['reason']}"
                )
        else:
            lines.append("  in-flight migrations: none")
        if st["recent"]:
            lines.append("  last decisions:")
            for d in st["recent"]:
                when = time.strftime("%H:%M:%S", time.localtime(d["decided_at"]))
                lines.append(f"    {when} {d['id']} {d['app']} [{d['kind']}] {d['status']}: {d['reason']}")
        lines += survivability_lines(st.get("survivability"), "  ")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
