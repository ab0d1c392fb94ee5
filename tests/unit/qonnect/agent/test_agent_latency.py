"""Where a probe's HTTP answer ends, and which peer URLs are accepted (no network)."""

from __future__ import annotations

import socket

import pytest
from qonnect.agent.latency import Exchange, Target, parse_peers


class Loop:
    """Both ends of a socketpair, the agent's end wrapped as a probe target."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.ours.setblocking(False)
        self.target = Target("http://127.0.0.1:1", 1.0, None, None)
        self.target.sock = self.ours

    def exchange(self) -> Exchange:
        exchange = Exchange(self.target, fresh=False)
        assert self.theirs.recv(1024).startswith(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        return exchange

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


@pytest.fixture
def loop():
    pair = Loop()
    yield pair
    pair.close()


def test_an_answer_with_content_length_ends_after_its_body_and_keeps_the_connection(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok")
    assert exchange.readable() is False  # two bytes of the body are still missing
    loop.theirs.sendall(b"ok")
    assert exchange.readable() is True and exchange.keep and exchange.ms >= 0


def test_a_chunked_answer_ends_at_its_last_chunk(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nno\r\n")
    assert exchange.readable() is False
    loop.theirs.sendall(b"0\r\n\r\n")
    assert exchange.readable() is True and exchange.keep


def test_connection_close_is_honoured(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert exchange.readable() is True and not exchange.keep


def test_an_answer_without_length_ends_when_the_server_closes(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"HTTP/1.0 200 OK\r\n\r\nok")
    assert exchange.readable() is False
    loop.theirs.shutdown(socket.SHUT_WR)
    assert exchange.readable() is True and not exchange.keep


def test_a_server_that_does_not_speak_http_is_an_error(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    with pytest.raises(ValueError, match="not an HTTP answer"):
        exchange.readable()


def test_a_connection_closed_mid_answer_is_an_error(loop):
    exchange = loop.exchange()
    loop.theirs.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
    loop.theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(ConnectionResetError):
        exchange.readable()


def test_a_kept_connection_the_server_closed_is_not_alive(loop):
    assert loop.target.alive()
    loop.theirs.close()
    assert not loop.target.alive() and loop.target.sock is None


def test_peers_are_parsed_and_bad_entries_named():
    assert parse_peers("a=https://10.0.0.1:6443, b=http://h") == {
        "a": "https://10.0.0.1:6443",
        "b": "http://h",
    }
    with pytest.raises(ValueError, match="'a=ftp://x'"):
        parse_peers("a=ftp://x")
    with pytest.raises(ValueError, match="given twice"):
        parse_peers("a=http://x,a=http://y")


def test_one_slow_probe_does_not_move_the_reported_latency_a_sustained_change_does():
    """Issue 22.6: one probe per tick read 7-50 ms on a 4 ms link under load."""
    from qonnect.agent.latency import Smoothed

    smooth = Smoothed(5)
    reported = [smooth.add({"edge-2": ms})["edge-2"] for ms in (4.0, 4.2, 50.0, 3.9, 4.1)]
    assert max(reported) < 10.0, reported  # a spike never reaches a 10 ms bound
    reported = [smooth.add({"edge-2": ms})["edge-2"] for ms in (20.0, 21.0, 20.5)]
    assert reported[-1] >= 20.0, reported  # three of five probes slower: reported slower


def test_a_target_that_stops_answering_is_left_out_and_starts_afresh():
    from qonnect.agent.latency import Smoothed

    smooth = Smoothed(3)
    smooth.add({"kb": 1.0, "edge-2": 4.0})
    assert smooth.add({"kb": 1.0}) == {"kb": 1.0}  # edge-2 unreachable: not reported
    assert smooth.add({"kb": 1.0, "edge-2": 9.0}) == {"kb": 1.0, "edge-2": 9.0}  # no stale 4 ms
