"""What the member clusters really run, read from their own API servers, and what processes cost.

Both systems are judged by the same ground truth: the Deployments on each member (Ready when
``readyReplicas >= replicas >= 1``), not by what either control plane believes.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Member:
    """One member cluster's API endpoint and credentials (from its testbed kubeconfig)."""

    name: str
    tier: str
    server: str
    token: str
    ca_pem: bytes

    @classmethod
    def from_kubeconfig(cls, name: str, tier: str, path: Path) -> Member:
        doc = yaml.safe_load(Path(path).read_text())
        cluster = doc["clusters"][0]["cluster"]
        return cls(
            name,
            tier,
            cluster["server"],
            doc["users"][0]["user"]["token"],
            base64.b64decode(cluster["certificate-authority-data"]),
        )

    def api(self) -> Api:
        return Api(self.server, self.token, self.ca_pem)


class Api:
    """Minimal synchronous JSON client (bearer token, CA-verified); errors raise ApiError."""

    def __init__(self, server: str, token: str, ca_pem: bytes, timeout: float = 3.0) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self.timeout = timeout
        with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as fh:
            fh.write(ca_pem)
        self._ssl = ssl.create_default_context(cafile=fh.name)
        os.unlink(fh.name)

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")[:300]) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise ApiError(0, str(exc)) from None
        return json.loads(text) if text else {}

    def get(self, path: str) -> Any:
        return self.request("GET", path)


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def deployments(member: Member, namespaces: set[str]) -> dict[tuple[str, str], bool] | None:
    """(namespace, name) -> Ready for the member's Deployments in namespaces; None if unreachable."""
    try:
        items = member.api().get("/apis/apps/v1/deployments")["items"]
    except ApiError:
        return None
    out = {}
    for d in items:
        ns = d["metadata"]["namespace"]
        if ns not in namespaces or d["metadata"].get("deletionTimestamp"):
            continue
        want = d["spec"].get("replicas", 1)
        ready = d.get("status", {}).get("readyReplicas", 0) or 0
        out[(ns, d["metadata"]["name"])] = want >= 1 and ready >= want
    return out


def snapshot(
    members: list[Member], namespaces: set[str], skip: frozenset[str] | set[str] = frozenset()
) -> dict[str, dict]:
    """cluster -> its Deployments (unreachable clusters and ``skip`` left out)."""
    seen = {}
    for m in members:
        if m.name in skip:
            continue
        d = deployments(m, namespaces)
        if d is not None:
            seen[m.name] = d
    return seen


def nodes_not_ready(member: Member) -> list[str]:
    """The member's nodes whose Ready condition is not True (["unreachable"] if its API is down).

    A member whose API server is back can still have NotReady nodes for tens of seconds; a
    trial started then finds no eligible cluster beside the one it fails.
    """
    try:
        items = member.api().get("/api/v1/nodes")["items"]
    except ApiError:
        return ["unreachable"]
    return [
        n["metadata"]["name"]
        for n in items
        if not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in n.get("status", {}).get("conditions") or []
        )
    ]


def where(seen: dict[str, dict], key: tuple[str, str], ready_only: bool = True) -> set[str]:
    return {c for c, d in seen.items() if key in d and (d[key] or not ready_only)}


# -- process cost ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid and its reaped children (playbook runs count for the controller)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cost(pids: dict[str, int], since: dict[str, tuple[int, float]] | None = None) -> dict[str, Any]:
    """CPU-seconds (since an earlier reading) and summed peak RSS of a set of processes.

    The baseline is per pid, not per name: a process restarted since ``since`` (a new pid under
    the same name, as the tuned phase's karmada-controller-manager and -scheduler) counts from
    0, its own whole life; the old process's CPU between the reading and its exit is lost (it
    is listed in ``gone``). Peak RSS is each listed process's own VmHWM (its peak since it
    started, not since ``since``), summed over processes: not a simultaneous peak, and without
    children (a controller replica's playbook runs, whose CPU is counted once reaped).
    """
    now = {name: (pid, cpu_seconds(pid)) for name, pid in pids.items()}
    base = since or {}
    per: dict[str, float] = {}
    restarted = []
    for name, (pid, cpu) in now.items():
        old_pid, old_cpu = base.get(name, (pid, 0.0))
        if old_pid != pid:
            restarted.append(name)
            old_cpu = 0.0
        per[name] = cpu - old_cpu
    return {
        "cpu_seconds": round(sum(per.values()), 1),
        "peak_rss_mib_sum": round(sum(peak_rss(p) for p in pids.values()) / 2**20, 1),
        "per_process_cpu_seconds": {n: round(v, 1) for n, v in per.items()},
        "per_process_peak_rss_mib": {n: round(peak_rss(p) / 2**20, 1) for n, p in pids.items()},
        "restarted": restarted,  # counted from 0: started (again) after the baseline
        "gone": sorted(set(base) - set(now)),  # exited since the baseline: their CPU after it is lost
        "_reading": now,
    }


def rss(pid: int) -> int:
    """The process's resident set now, bytes (0 if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def parents() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


class RssSampler(threading.Thread):
    """Samples, every ``interval`` s, each system's resident memory at that moment: its listed
    processes plus all their descendants (a controller replica's playbook runs and its proctree
    watchdog), and keeps the largest sum per system since the last ``reset``.

    A simultaneous peak, unlike cost()'s sum of per-process peaks, and the only figure that
    includes children; a child living less than ``interval`` may be missed.
    """

    def __init__(self, systems: dict[str, Callable[[], dict[str, int]]], interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.systems, self.interval = systems, interval
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.peaks: dict[str, dict[str, float]] = {}
        self.samples = 0

    def reset(self) -> None:
        with self.lock:
            self.peaks, self.samples = {}, 0

    def read(self) -> dict[str, Any]:
        with self.lock:
            return {"samples": self.samples, "interval_s": self.interval, **self.peaks}

    def sample(self) -> None:
        tree: dict[int, list[int]] = {}
        for pid, ppid in parents().items():
            tree.setdefault(ppid, []).append(pid)
        for system, pids_of in self.systems.items():
            try:
                roots = set(pids_of().values())
            except Exception:  # a list changing under us: the next sample
                continue
            children, stack = set(), list(roots)
            while stack:
                for child in tree.get(stack.pop(), []):
                    if child not in children and child not in roots:
                        children.add(child)
                        stack.append(child)
            own = sum(rss(p) for p in roots) / 2**20
            kids = sum(rss(p) for p in children) / 2**20
            with self.lock:
                peak = self.peaks.setdefault(
                    system, {"peak_total_mib": 0.0, "peak_children_mib": 0.0, "max_children": 0}
                )
                peak["peak_total_mib"] = round(max(peak["peak_total_mib"], own + kids), 1)
                peak["peak_children_mib"] = round(max(peak["peak_children_mib"], kids), 1)
                peak["max_children"] = max(peak["max_children"], len(children))
        with self.lock:
            self.samples += 1

    def run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                self.sample()
            except Exception:  # sampling must never end the benchmark
                time.sleep(self.interval)

    def stop(self) -> None:
        self.done.set()
