"""Raft port limits on real replicas: pre-auth timeout and cap, exact bind, clear bind failure."""

from __future__ import annotations

import os
import socket
import time

import pytest
from _controller_stack import Replica, Stack, wait_for
from qonnect.controller.raft_transport import MAX_UNAUTHENTICATED, PRE_AUTH_TIMEOUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_unauthenticated_connections_are_capped_and_time_out(raft3: Stack):
    """25.5: 300 idle connections from an allowed address held 300 fds for 45 s."""
    leader = raft3.wait_leader()
    host, port = leader.raft.rsplit(":", 1)
    before = _fds(leader.proc.pid)
    socks = []
    for _i in range(300):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.setblocking(False)
        socks.append(s)
    try:
        # the cap: at most MAX_UNAUTHENTICATED of them are held while they stay silent
        wait_for(
            lambda: sum(not _closed_by_peer(s) for s in socks) <= MAX_UNAUTHENTICATED,
            10,
            what="connections over the cap to be closed",
        )
        assert _fds(leader.proc.pid) <= before + MAX_UNAUTHENTICATED + 5
        t0 = time.monotonic()
        wait_for(lambda: all(_closed_by_peer(s) for s in socks), PRE_AUTH_TIMEOUT + 10, what="timeouts")
        assert time.monotonic() - t0 <= PRE_AUTH_TIMEOUT + 10
        wait_for(lambda: _fds(leader.proc.pid) <= before + 2, 10, what="the leader's fds to come back")
    finally:
        for s in socks:
            s.close()
    # the real peers were never refused: same leader, all peers connected
    st = leader.status()
    assert st and st["is_leader"] and all(st["peers"].values())
    assert "did not authenticate within" in leader.log()


def test_raft_binds_exactly_the_self_address_and_says_why_it_cannot(kb_stack: Stack):
    """22.10: a socket on 127.0.0.7:<port> made the 0.0.0.0 bind fail silently."""
    holder = socket.socket()
    holder.bind(("127.0.0.7", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        ok = Replica(kb_stack, 0, f"127.0.0.1:{port}", [f"127.0.0.1:{port}"], [])
        kb_stack.replicas.append(ok)
        ok.start()  # binds 127.0.0.1:<port> although 127.0.0.7:<port> is taken
        wait_for(lambda: (ok.status() or {}).get("is_leader"), 15, what="the single replica to lead")
        with pytest.raises(ConnectionRefusedError):  # nothing listens on another loopback address
            socket.create_connection(("127.0.0.2", port), timeout=2).close()

        clash = Replica(kb_stack, 1, f"127.0.0.7:{port}", [f"127.0.0.7:{port}"], [])
        clash.start(wait=False)
        rc = clash.proc.wait(timeout=30)
        assert rc != 0
        out = clash.log()
        assert f"127.0.0.7:{port}" in out and "Address already in use" in out, out
        assert "Traceback" not in out, out
    finally:
        holder.close()
        kb_stack.stop_replicas()
