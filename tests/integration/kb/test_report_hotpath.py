"""The protocol-level report path (kb/hotpath.py) answers exactly as the ASGI application does.

`kb serve` answers valid, authorised agent reports inside the HTTP protocol; with
`--access-log` every request goes through the ASGI stack. The same raw requests - valid,
duplicate, invalid, forbidden, unknown cluster, `Connection: close`, pipelined - sent to both
must get the same status, headers and body, and pipelined answers must come back in order.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

REPORT = '{{"seq":{seq},"ts":1.0,"reachable":true,"latencies":{{"peer":1.5}},"nodes":[]}}'


def _request(path: str, token: str, body: str | None = None, close: bool = False) -> bytes:
    head = f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1\r\nHost: kb\r\nAuthorization: Bearer {token}\r\n"
    if close:
        head += "Connection: close\r\n"
    data = (body or "").encode()
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return (head + "\r\n").encode() + data


def _exchange(port: int, raw: bytes, answers: int) -> list[tuple[int, dict[str, str], object]]:
    """Send ``raw`` at once on one connection; read ``answers`` responses (status, headers
    without the date, JSON body)."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        buf = b""
        while len(out) < answers:
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed after {len(out)} of {answers} answers"
                buf += chunk
            head, _sep, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.lower(): v.strip() for k, _s, v in (line.partition(":") for line in lines[1:])}
            length = int(headers["content-length"])
            while len(buf) < length:
                chunk = sock.recv(65536)
                assert chunk, "connection closed inside a body"
                buf += chunk
            body, buf = buf[:length], buf[length:]
            headers.pop("date", None)
            out.append((int(lines[0].split(" ")[1]), headers, json.loads(body)))
    return out


@pytest.fixture()
def two_kbs(kb_process, make_token, tmp_path: Path):
    """The same records in two SQLite KBs: one with the short path, one without (access log)."""
    kbs = []
    for name, extra in (("short", ()), ("asgi", ("--access-log",))):
        db_url = f"sqlite://{tmp_path / name}.sqlite"
        admin = make_token(db_url, "admin")
        proc = kb_process(db_url, *extra)
        port = int(proc.url.rsplit(":", 1)[1])
        for cluster in ("c1", "c2"):
            status = _exchange(
                port,
                _request(
                    "/api/v1/clusters",
                    admin,
                    json.dumps({"name": cluster, "tier": "edge", "location": cluster, "labels": {}}),
                ),
                1,
            )[0][0]
            assert status in (200, 201)
        kbs.append((port, admin, make_token(db_url, "agent", "c1")))
    return kbs


def _script(admin: str, agent: str) -> list[tuple[bytes, int]]:
    path = "/api/v1/clusters/c1/reports"
    return [
        (_request(path, agent, REPORT.format(seq=1)), 1),
        (_request(path, agent, REPORT.format(seq=1)), 1),  # a duplicate: applied false
        (_request(path, agent, REPORT.format(seq='"x"')), 1),  # invalid: the field is named
        (_request(path, agent, "{not json"), 1),
        (_request("/api/v1/clusters/c2/reports", agent, REPORT.format(seq=2)), 1),  # forbidden
        (_request("/api/v1/clusters/nope/reports", admin, REPORT.format(seq=2)), 1),  # unknown
        (_request("/api/v1/clusters/nope/reports", admin, REPORT.format(seq=3)), 1),
        (_request(path, agent, REPORT.format(seq=4), close=True), 1),
        (  # pipelined: answered in order
            _request(path, agent, REPORT.format(seq=5))
            + _request("/api/v1/clusters/c1", admin)
            + _request(path, agent, REPORT.format(seq=7))
            + _request(path, agent, REPORT.format(seq=6)),
            4,
        ),
    ]


def test_reports_get_the_same_answers_with_and_without_the_short_path(two_kbs):
    (short, short_admin, short_agent), (asgi, asgi_admin, asgi_agent) = two_kbs
    for (raw_s, n), (raw_a, _n) in zip(
        _script(short_admin, short_agent), _script(asgi_admin, asgi_agent), strict=True
    ):
        got, want = _exchange(short, raw_s, n), _exchange(asgi, raw_a, n)
        for (s_status, s_headers, s_body), (a_status, a_headers, a_body) in zip(got, want, strict=True):
            if isinstance(a_body, dict) and "tier" in a_body:  # a cluster: timestamps differ
                for body, headers in ((s_body, s_headers), (a_body, a_headers)):
                    for key in ("created", "updated", "status"):
                        body.pop(key, None)
                    headers.pop("content-length")
            assert (s_status, s_headers, s_body) == (a_status, a_headers, a_body), raw_s[:200]


def test_pipelined_reports_are_answered_in_order_and_merged_by_seq(two_kbs):
    port, admin, agent = two_kbs[0]
    path = "/api/v1/clusters/c1/reports"
    raw = b"".join(_request(path, agent, REPORT.format(seq=s)) for s in (10, 12, 11, 12))
    answers = _exchange(port, raw, 4)
    assert [(status, body) for status, _h, body in answers] == [
        (200, {"seq": 10, "applied": True}),
        (200, {"seq": 12, "applied": True}),
        (200, {"seq": 11, "applied": False}),
        (200, {"seq": 12, "applied": False}),
    ]
    assert all(
        h["cache-control"] == "no-store" and h["x-content-type-options"] == "nosniff" for _s, h, _b in answers
    )
    status, _h, record = _exchange(port, _request("/api/v1/clusters/c1", admin), 1)[0]
    assert status == 200 and record["status"]["seq"] == 12
