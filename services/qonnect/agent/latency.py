"""Round-trip times from this agent to the KB and to peer clusters.

Each target gets one persistent connection (bound to ``source_address`` when given, so the agent
measures from its site's address). A probe times one unauthenticated ``GET /healthz`` on that
warm connection: one network round trip plus the server's minimal work, the path real traffic
takes, without a TCP or TLS handshake in the number. Re-doing those handshakes every tick cost
far more CPU than everything else the agent does, and measured the handshake, not the network.
A connection the server dropped is reopened before the probe. If the server does not speak
HTTP(S) as expected, the TCP connect time (one SYN/SYN-ACK round trip) is used instead.
No credentials are ever sent on a probe, so peers' certificates are not verified unless a CA is
given: the probe learns nothing secret and sends nothing secret.
"""

from __future__ import annotations

import logging
import select
import selectors
import socket
import ssl
import statistics
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# probes per target a reported latency is the median of (issue 22.6: one unsmoothed probe per
# tick read 7-50 ms on a 4 ms link under load, and a hard maxLatency bound flapped)
LATENCY_WINDOW = 5


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
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA store to load: nothing is verified
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Target:
    """One probed URL and its persistent connection (a socket, TLS-wrapped for https)."""

    def __init__(self, url: str, timeout: float, source_address: str | None, ca_path: str | None):
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        path = parts.path.rstrip("/") + "/healthz"
        self.request = f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAccept: */*\r\n\r\n".encode()
        self.timeout = timeout
        self.source = (source_address, 0) if source_address else None
        self.ca_path = ca_path
        self._ssl: ssl.SSLContext | None = None  # made once: loading a CA store costs ms of CPU
        self.sock: socket.socket | None = None
        self.connect_ms = 0.0

    def alive(self) -> bool:
        """The kept connection is still open (the server did not close it while idle)."""
        if self.sock is None:
            return False
        try:
            if not select.select([self.sock], [], [], 0)[0]:
                return True
            self.sock.recv(1)  # readable while idle: EOF, or bytes nobody asked for
        except (BlockingIOError, ssl.SSLWantReadError):
            return True  # only TLS housekeeping (e.g. session tickets) arrived
        except (OSError, ValueError):
            pass
        self.close()
        return False

    def connect(self) -> str:
        """Open a new connection: "http" if ready for a probe, "tcp" if only TCP works, "down"."""
        self.close()
        started = time.perf_counter()
        try:
            sock = socket.create_connection((self.host, self.port), self.timeout, self.source)
        except OSError as exc:
            log.debug("probe %s:%s: %s", self.host, self.port, exc.strerror or exc)
            return "down"
        self.connect_ms = (time.perf_counter() - started) * 1000.0
        try:
            if self.https:
                if self._ssl is None:
                    self._ssl = _ssl_context(self.ca_path)
                sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:  # ssl.SSLError is an OSError
            log.debug("probe %s:%s: TLS failed (%s); using TCP connect time", self.host, self.port, exc)
            sock.close()
            return "tcp"
        sock.setblocking(False)
        self.sock = sock
        return "http"

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Exchange:
    """One ``GET /healthz`` in flight on a target's connection: a minimal HTTP/1.1 reader.

    http.client parses headers through the email package, which costs several times the CPU of
    the exchange itself; a probe only needs to know where the answer ends.
    """

    def __init__(self, target: Target, fresh: bool) -> None:
        self.target = target
        self.fresh = fresh
        self.buf = b""
        self.keep = True
        self.ms = 0.0
        assert target.sock is not None
        self.started = time.perf_counter()
        target.sock.sendall(target.request)  # a few dozen bytes: never blocks on a new request

    def readable(self) -> bool:
        """Read what arrived; True once the whole answer is in. OSError/ValueError if broken."""
        sock = self.target.sock
        assert sock is not None
        while True:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return self._complete(eof=False)
            if not chunk:
                if self._complete(eof=True):
                    return True
                raise ConnectionResetError("connection closed before the whole answer")
            self.buf += chunk

    def _complete(self, eof: bool) -> bool:
        head, sep, body = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return False
        status, *lines = head.split(b"\r\n")
        if not status.startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP answer: {status[:40]!r}")
        fields = {}
        for line in lines:
            name, _colon, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        if fields.get(b"connection") == b"close" or status.startswith(b"HTTP/1.0"):
            self.keep = False
        if b"content-length" in fields:
            done = len(body) >= int(fields[b"content-length"])
        elif fields.get(b"transfer-encoding") == b"chunked":
            done = body.endswith(b"0\r\n\r\n")
        else:  # the answer ends where the server closes the connection
            done, self.keep = eof, False
        if done:
            self.ms = (time.perf_counter() - self.started) * 1000.0
        return done


class Prober:
    """Measures every target each call, over connections kept between calls.

    Connections are (re)opened in parallel threads, which is rare; the probes themselves run
    concurrently from the calling thread: every request is sent, then the answers are read as
    they arrive, each timed from its own send.
    """

    def __init__(
        self,
        targets: Mapping[str, str],
        timeout: float = 2.0,
        source_address: str | None = None,
        ca_paths: Mapping[str, str] | None = None,
    ) -> None:
        ca_paths = ca_paths or {}
        self.timeout = timeout
        self.targets = {
            name: Target(url, timeout, source_address, ca_paths.get(name)) for name, url in targets.items()
        }
        self._pool: ThreadPoolExecutor | None = None

    def measure(self) -> dict[str, float]:
        """RTT in ms for every reachable target; unreachable ones are left out."""
        results: dict[str, float] = {}
        retry = self._round(list(self.targets), results)
        if retry:  # kept connections the server had dropped: once more on new ones
            self._round(retry, results)
        return {name: round(results[name], 3) for name in self.targets if name in results}

    def _connect(self, names: list[str]) -> dict[str, str]:
        if len(names) <= 1:
            return {name: self.targets[name].connect() for name in names}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(min(8, len(self.targets)), thread_name_prefix="probe")
        return dict(zip(names, self._pool.map(lambda n: self.targets[n].connect(), names), strict=True))

    def _round(self, names: list[str], results: dict[str, float]) -> list[str]:
        """Probe ``names`` once into ``results``; the names whose kept connection broke."""
        states = self._connect([n for n in names if not self.targets[n].alive()])
        retry: list[str] = []
        flying: dict[str, Exchange] = {}

        def failed(name: str, fresh: bool, why: object) -> None:
            target = self.targets[name]
            target.close()
            if not fresh:
                retry.append(name)
            else:  # the server does not speak HTTP(S) as expected
                log.debug("probe %s: HTTP failed (%s); using TCP connect time", name, why)
                results[name] = target.connect_ms

        for name in names:
            state = states.get(name, "kept")
            if state == "tcp":
                results[name] = self.targets[name].connect_ms
            elif state != "down":
                try:
                    flying[name] = Exchange(self.targets[name], fresh=state == "http")
                except OSError as exc:
                    failed(name, state == "http", exc)
        with selectors.DefaultSelector() as sel:
            for name, exchange in flying.items():
                sel.register(exchange.target.sock, selectors.EVENT_READ, name)  # type: ignore[arg-type]
            deadline = time.monotonic() + self.timeout
            while flying and (left := deadline - time.monotonic()) > 0:
                for key, _events in sel.select(left):
                    exchange = flying[key.data]
                    try:
                        done = exchange.readable()
                    except (OSError, ValueError) as exc:
                        sel.unregister(key.fileobj)
                        del flying[key.data]
                        failed(key.data, exchange.fresh, exc)
                        continue
                    if done:
                        sel.unregister(key.fileobj)
                        del flying[key.data]
                        results[key.data] = exchange.ms
                        if not exchange.keep:
                            exchange.target.close()
        for name, exchange in flying.items():  # no answer in time: a slow server, not a stale link
            log.debug("probe %s: no answer within %g s", name, self.timeout)
            exchange.target.close()
            if exchange.fresh:
                results[name] = exchange.target.connect_ms
        return retry

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for target in self.targets.values():
            target.close()


class Smoothed:
    """The median of each target's last ``window`` probes: a scheduling hiccup or one slow
    answer does not move the reported latency; a sustained change does, after half the window.
    A target that did not answer this tick is left out and its window starts afresh (an
    unreachable peer is not reported with its old latency)."""

    def __init__(self, window: int = LATENCY_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window: expected a count >= 1, got {window}")
        self.window = window
        self.samples: dict[str, deque[float]] = {}

    def add(self, measured: Mapping[str, float]) -> dict[str, float]:
        for name in set(self.samples) - set(measured):
            del self.samples[name]
        for name, ms in measured.items():
            self.samples.setdefault(name, deque(maxlen=self.window)).append(ms)
        return {name: round(statistics.median(self.samples[name]), 3) for name in measured}
