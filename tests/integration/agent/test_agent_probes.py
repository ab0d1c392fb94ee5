"""Latency probes against real local HTTP servers: kept connections, reconnects, fallbacks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from qonnect.agent.latency import Prober

pytestmark = pytest.mark.timeout(60)


class Peer:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 that answers /healthz after ``delay`` s."""

    def __init__(self, delay: float = 0.0, port: int = 0) -> None:
        self.delay = delay
        self.connections: list[str] = []  # client address of each accepted connection
        self.requests = 0
        self.open: list[socket.socket] = []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                peer.connections.append(self.client_address[0])
                peer.open.append(self.connection)

            def do_GET(self) -> None:
                peer.requests += 1
                time.sleep(peer.delay)
                body = b"ok" if self.path == "/healthz" else b"not found"
                self.send_response(200 if self.path == "/healthz" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and drop every open connection, as a restarted server would."""
        self.server.shutdown()
        self.server.server_close()
        for conn in self.open:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by its handler
                pass
        self._thread.join(5)


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.stop()


@pytest.fixture
def prober_for():
    made: list[Prober] = []

    def make(targets: dict[str, str], **kwargs) -> Prober:
        prober = Prober(targets, **kwargs)
        made.append(prober)
        return prober

    yield make
    for prober in made:
        prober.close()


def test_probes_reuse_one_connection_per_peer_and_time_the_round_trip(peers, prober_for):
    slow = Peer(delay=0.05)
    peers.append(slow)
    prober = prober_for({"slow": slow.url}, timeout=2.0)
    first = prober.measure()
    second = prober.measure()
    assert first["slow"] >= 50 and second["slow"] >= 50
    assert slow.requests == 2 and len(slow.connections) == 1


def test_peers_are_probed_concurrently(peers, prober_for):
    for _peer in range(4):
        peers.append(Peer(delay=0.5))
    prober = prober_for({f"p{i}": p.url for i, p in enumerate(peers)}, timeout=2.0)
    prober.measure()  # opens the connections
    started = time.monotonic()
    result = prober.measure()
    assert set(result) == {"p0", "p1", "p2", "p3"} and min(result.values()) >= 500
    assert time.monotonic() - started < 1.5  # four 0.5 s answers, not one after the other


def test_a_peer_that_dropped_the_connection_is_measured_on_a_new_one(peers, prober_for):
    peer = Peer()
    peers.append(peer)
    prober = prober_for({"p": peer.url})
    assert "p" in prober.measure()
    port = peer.server.server_address[1]
    peer.stop()
    assert prober.measure() == {}  # down: left out, not an error
    again = Peer(port=port)
    peers.append(again)
    assert "p" in prober.measure()
    assert len(again.connections) == 1


def test_a_listener_that_does_not_speak_http_gives_its_tcp_connect_time(prober_for):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def garbage() -> None:
            conn, _address = listener.accept()
            with conn:
                conn.sendall(b"SSH-2.0-x\r\n\r\n")
                conn.recv(1024)

        thread = threading.Thread(target=garbage, daemon=True)
        thread.start()
        result = prober_for({"odd": f"http://127.0.0.1:{port}"}, timeout=2.0).measure()
        thread.join(5)
    assert 0 < result["odd"] < 1000


def test_probes_are_sent_from_the_source_address(peers, prober_for):
    peer = Peer()
    peers.append(peer)
    prober = prober_for({"p": peer.url}, source_address="127.0.0.2")
    assert "p" in prober.measure()
    assert peer.connections == ["127.0.0.2"]
