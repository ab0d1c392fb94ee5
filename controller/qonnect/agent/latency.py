"""Round-trip times from this agent to the KB and to peer clusters.

A probe opens a connection (bound to ``source_address`` when given, so the agent measures from
its site's address), then times one unauthenticated ``GET /healthz``: that is one network round
trip plus the server's minimal work, the same path real traffic takes. If the server does not
speak HTTP(S) as expected, the TCP connect time (one SYN/SYN-ACK round trip) is used instead.
No credentials are ever sent on a probe, so peers' certificates are not verified unless a CA is
given: the probe learns nothing secret and sends nothing secret.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

log = logging.getLogger(__name__)


class ProbeError(Exception):
    """The target could not be reached at all."""


def parse_peers(text: str) -> dict[str, str]:
    """``name=https://host:port,...`` -> {name: url}; ValueError names the bad entry."""
    peers: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, url = entry.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not name or not url:
            raise ValueError(f"--peers entry {entry!r}: expected name=https://host:port")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--peers entry {entry!r}: URL must be http(s)://host[:port]")
        if name in peers:
            raise ValueError(f"--peers: peer {name!r} is given twice")
        peers[name] = url
    return peers


def _ssl_context(ca_path: str | None) -> ssl.SSLContext:
    if ca_path:
        return ssl.create_default_context(cafile=ca_path)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def probe(
    url: str,
    timeout: float = 2.0,
    source_address: str | None = None,
    ca_path: str | None = None,
) -> float:
    """Milliseconds for one ``GET /healthz`` round trip to ``url``'s host; ProbeError if down."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    source = (source_address, 0) if source_address else None
    started = time.perf_counter()
    try:
        sock = socket.create_connection((host, port), timeout=timeout, source_address=source)
    except OSError as exc:
        raise ProbeError(f"{host}:{port}: {exc.strerror or exc}") from None
    connect_ms = (time.perf_counter() - started) * 1000.0
    conn: http.client.HTTPConnection
    try:
        if https:
            sock = _ssl_context(ca_path).wrap_socket(sock, server_hostname=host)
            conn = http.client.HTTPSConnection(host, port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.sock = sock
        path = (parts.path.rstrip("/") or "") + "/healthz"
        started = time.perf_counter()
        conn.request("GET", path, headers={"Connection": "close"})
        conn.getresponse().read()
        return (time.perf_counter() - started) * 1000.0
    except (OSError, http.client.HTTPException) as exc:
        log.debug("probe %s: HTTP failed (%s); using TCP connect time", url, exc)
        return connect_ms
    finally:
        sock.close()


def measure(
    targets: Mapping[str, str],
    timeout: float = 2.0,
    source_address: str | None = None,
    ca_paths: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """RTT in ms for every reachable target, probed in parallel; unreachable ones are left out."""
    if not targets:
        return {}
    ca_paths = ca_paths or {}

    def one(item: tuple[str, str]) -> tuple[str, float | None]:
        name, url = item
        try:
            return name, round(probe(url, timeout, source_address, ca_paths.get(name)), 3)
        except ProbeError as exc:
            log.debug("latency probe to %s failed: %s", name, exc)
            return name, None

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        results = pool.map(one, targets.items())
        return {name: ms for name, ms in results if ms is not None}
