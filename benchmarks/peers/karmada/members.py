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
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def cost(pids: dict[str, int], since: dict[str, float] | None = None) -> dict[str, Any]:
    """CPU-seconds (since an earlier reading) and summed peak RSS of a set of processes."""
    now = {name: cpu_seconds(pid) for name, pid in pids.items()}
    base = since or {}
    return {
        "cpu_seconds": round(sum(now[n] - base.get(n, 0.0) for n in now), 1),
        "peak_rss_mib_sum": round(sum(peak_rss(p) for p in pids.values()) / 2**20, 1),
        "per_process_cpu_seconds": {n: round(now[n] - base.get(n, 0.0), 1) for n in now},
        "_reading": now,
    }
