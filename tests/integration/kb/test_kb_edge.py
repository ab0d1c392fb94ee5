"""The KB at its network edge: stalled and unauthenticated clients, the connection cap, the
access log, security headers, no CDN, token revocation by id, listening and file modes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from test_kb_api import raw

pytestmark = pytest.mark.timeout(240)
STALLED = 100  # per kind of stalled client
TIMEOUT = 3.0
MAIN = "import sys; from qonnect.cli import main; sys.exit(main())"


def qonnect_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", MAIN, *args]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _addr(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port


def _stall(addr: tuple[str, int], head: bytes, body: int) -> socket.socket:
    """Connect, send ``head`` and up to ``body`` bytes of body, then go silent."""
    sock = socket.create_connection(addr, timeout=5)
    try:
        sock.sendall(head)
        chunk = b"x" * 65536
        sent = 0
        while sent < body:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # the KB answered and closed instead of reading: what we want
        pass
    return sock


def _closed_by_server(sock: socket.socket, wait: float) -> tuple[bool, bytes]:
    sock.settimeout(wait)
    got = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True, got
            got += data
    except (ConnectionResetError, BrokenPipeError):
        return True, got
    except TimeoutError:
        return False, got


def test_stalled_and_unauthenticated_clients_are_bounded_and_timed_out(
    db_url_factory, kb_process, make_token
):
    db = db_url_factory("sqlite")
    admin = make_token(db, "admin")
    kb = kb_process(db, "--request-timeout", str(TIMEOUT))
    addr = _addr(kb.url)
    pid = kb.proc.pid
    KBClient(kb.url, admin).list_clusters()  # warm up
    before = _rss_mib(pid)
    length = 1_000_000
    post = (
        f"POST /api/v1/applications/x HTTP/1.1\r\nHost: kb\r\nContent-Type: application/json"
        f"\r\nContent-Length: {length}\r\n"
    ).encode()
    socks = []
    started = time.monotonic()
    for _i in range(STALLED):
        socks.append(_stall(addr, post + b"\r\n", 900_000))  # no token, a big body
        socks.append(_stall(addr, post + b"Authorization: Bearer qkb_forged\r\n\r\n", 900_000))
        socks.append(socket.create_connection(addr))  # connects, never sends
        socks.append(_stall(addr, b"POST /api/v1/events HTTP/1.1\r\nHost: kb\r\n", 0))  # slowloris
    peak = _rss_mib(pid)
    assert peak - before < 40, f"RSS grew from {before:.0f} to {peak:.0f} MiB"
    assert KBClient(kb.url, admin).list_clusters() == []  # still serving during the attack
    deadline = started + TIMEOUT + 10
    open_ones = []
    answers = []
    for sock in socks:
        closed, got = _closed_by_server(sock, max(0.1, deadline - time.monotonic()))
        answers.append(got.split(b"\r\n", 1)[0])
        if not closed:
            open_ones.append(sock)
        sock.close()
    assert open_ones == [], f"{len(open_ones)} of {len(socks)} stalled connections still open"
    statuses = {a.split(b" ")[1] for a in answers if a}
    assert statuses <= {b"401", b"408"}, statuses
    assert _rss_mib(pid) - before < 40


def test_connections_above_the_cap_get_503_and_are_closed(db_url_factory, kb_process, make_token):
    db = db_url_factory("sqlite")
    admin = make_token(db, "admin")
    kb = kb_process(db, "--max-connections", "20")
    addr = _addr(kb.url)
    socks = [socket.create_connection(addr) for _i in range(40)]
    refused = 0
    for sock in socks[20:]:
        closed, got = _closed_by_server(sock, 5)
        refused += closed and got.startswith(b"HTTP/1.1 503")
    assert refused >= 15, refused
    for sock in socks:
        sock.close()
    time.sleep(0.5)
    assert KBClient(kb.url, admin).list_clusters() == []


def test_access_log_headers_and_no_cdn(db_url_factory, kb_process, make_token):
    db = db_url_factory("sqlite")
    admin_token = make_token(db, "admin")
    kb = kb_process(db, "--access-log")
    admin = KBClient(kb.url, admin_token)
    made = admin.request("POST", "/api/v1/tokens", {"role": "reader", "name": "dash-board"})
    reader = KBClient(kb.url, made["token"])
    reader.list_clusters()
    with pytest.raises(KBError):
        KBClient(kb.url, "qkb_forged").list_clusters()
    admin.register_cluster({"name": "edge-1", "tier": "edge"})
    agent = admin.request(
        "POST", "/api/v1/tokens", {"role": "agent", "cluster": "edge-1", "name": "agent-edge-1"}
    )["token"]
    KBClient(kb.url, agent).report("edge-1", {"seq": 1, "ts": time.time()})  # the fast path

    # headers: every API answer, the fresh token's, errors and the fast path included
    for method, path, body, token in (
        ("GET", "/api/v1/whoami", None, admin_token),
        ("POST", "/api/v1/tokens", b'{"role": "reader"}', admin_token),
        ("GET", "/api/v1/clusters", None, None),
        ("PUT", "/api/v1/placements/nope", b'{"fencing": {"term": "1", "seq": 1}}', admin_token),
        ("POST", "/api/v1/clusters/edge-1/reports", json.dumps({"seq": 2, "ts": 1.0}).encode(), agent),
        ("GET", "/healthz", None, None),
    ):
        conn = http.client.HTTPConnection(*_addr(kb.url), timeout=10)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.getheader("Cache-Control") == "no-store", (path, resp.status)
        assert resp.getheader("X-Content-Type-Options") == "nosniff", (path, resp.status)
        conn.close()
    for path in ("/docs", "/redoc", "/openapi.json"):  # the schema maps the API: token only
        assert raw(kb, "GET", path, None, None)[0] == 401, path
    assert raw(kb, "GET", "/docs", None, admin_token)[0] == 404  # no Swagger UI from a CDN
    assert raw(kb, "GET", "/openapi.json", None, admin_token)[0] == 200

    time.sleep(0.5)
    lines = [ln for ln in kb.read_log().splitlines() if "kb-access" in ln]
    assert any('GET "/api/v1/clusters" 200' in ln and 'token="dash-board"' in ln for ln in lines), lines
    assert any('GET "/api/v1/clusters" 401' in ln and "token=-" in ln for ln in lines), lines
    assert any(
        'POST "/api/v1/clusters/edge-1/reports" 200' in ln and 'token="agent-edge-1"' in ln for ln in lines
    ), lines
    assert all("ms token=" in ln for ln in lines)
    log = kb.read_log()
    assert made["token"] not in log and agent not in log and admin_token not in log


def test_tokens_are_listed_and_revoked_one_by_one(db_url_factory, kb_process, make_token):
    db = db_url_factory("sqlite")
    kb = kb_process(db)
    admin = KBClient(kb.url, make_token(db, "admin"))
    first = admin.request("POST", "/api/v1/tokens", {"role": "reader", "name": "dup"})
    second = admin.request("POST", "/api/v1/tokens", {"role": "reader", "name": "dup"})
    listed = admin.request("GET", "/api/v1/tokens")["tokens"]
    dups = [t for t in listed if t["name"] == "dup"]
    assert sorted(t["id"] for t in dups) == sorted([first["id"], second["id"]])
    assert all(set(t) == {"id", "name", "role", "cluster", "created"} for t in listed)
    reader = KBClient(kb.url, first["token"])
    with pytest.raises(KBError) as err:
        reader.request("GET", "/api/v1/tokens")
    assert err.value.status == 403
    with pytest.raises(KBError) as err:
        reader.request("DELETE", f"/api/v1/tokens/{second['id']}")
    assert err.value.status == 403
    admin.request("DELETE", f"/api/v1/tokens/{first['id']}")
    with pytest.raises(KBError) as err:
        reader.list_clusters()
    assert err.value.status == 401
    assert KBClient(kb.url, second["token"]).list_clusters() == []  # same name, still valid
    with pytest.raises(KBError) as err:
        admin.request("DELETE", f"/api/v1/tokens/{first['id']}")
    assert err.value.status == 404


def test_plain_http_beyond_loopback_is_refused_and_the_database_is_private(tmp_path):
    db = f"sqlite://{tmp_path / 'kb.sqlite'}"
    done = subprocess.run(
        qonnect_cmd("kb", "serve", "--db", db, "--host", "0.0.0.0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0" in done.stderr and "--insecure-listen" in done.stderr
    assert "Traceback" not in done.stderr
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.sqlite"
        done = subprocess.run(
            qonnect_cmd("kb", "migrate", "--db", f"sqlite://{fresh}"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        qonnect_cmd(
            "kb",
            "serve",
            "--db",
            db,
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--insecure-listen",
            "--port-file",
            str(port_file),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert port_file.exists(), proc.stderr.read() if proc.poll() is not None else "no port"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
