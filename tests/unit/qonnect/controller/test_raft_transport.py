"""The Raft port's limits hold on the controller's own connections only (raft_transport.py).

Before authentication a connection may buffer at most ``PRE_AUTH_MAX_BYTES`` and announce no
frame over it; once a message decrypted, frames up to ``MAX_FRAME_BYTES``. Those bounds used to
be assigned onto pysyncobj's ``TcpConnection`` when the controller was imported, so every
pysyncobj connection in the process had them; now ``GuardedTransport`` creates a
``GuardedConnection`` for each of its connections, outgoing and incoming, and nothing in
pysyncobj's modules or classes changes. (The timeout and cap of unauthenticated connections run
on real replicas: tests/integration/controller/test_controller_raft_limits.py.)
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from pysyncobj import pickle as _pickle
from pysyncobj import serializer, syncobj
from pysyncobj.atomic_replace import atomicReplace
from pysyncobj.encryptor import getEncryptor
from pysyncobj.journal import createJournal
from pysyncobj.monotonic import monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from qonnect.controller.raft import RaftNode, Timing
from qonnect.controller.raft_transport import (
    MAX_FRAME_BYTES,
    PRE_AUTH_MAX_BYTES,
    GuardedConnection,
    GuardedServer,
)
from support import free_port, wait_for

SECRET = "s3cr3t-" * 6
QUIET = Timing(election_min=600, election_max=1200, leader_fallback=1300, connection_timeout=1300)
HUGE = struct.pack("i", 2**31 - 1)  # a frame header claiming 2 GiB


class Poller:
    """What a connection needs of pysyncobj's poller when the test drives its reads."""

    def subscribe(self, *_args: Any) -> None:
        pass

    def unsubscribe(self, *_args: Any) -> None:
        pass


class Wire:
    """A connection of class CLS on one end of a socket pair; the test writes the other end."""

    def __init__(self, cls: type, encryptor: Any = None) -> None:
        ours, self.theirs = socket.socketpair()
        ours.setblocking(False)
        self.received: list[Any] = []
        self.conn = cls(Poller(), onMessageReceived=self.received.append, socket=ours)
        self.conn.encryptor = encryptor

    def feed(self, data: bytes) -> None:
        """Write DATA in pieces, letting the connection read each (as the poller would)."""
        for start in range(0, len(data), 32 * 1024):
            if not self.open:
                return
            self.theirs.sendall(data[start : start + 32 * 1024])
            self.conn._TcpConnection__processConnection(self.conn.fileno(), POLL_EVENT_TYPE.READ)

    @property
    def open(self) -> bool:
        return bool(self.conn.state == CONNECTION_STATE.CONNECTED)

    def close(self) -> None:
        self.conn.disconnect()
        self.theirs.close()


@pytest.fixture()
def wires() -> Iterator[list[Wire]]:
    made: list[Wire] = []
    yield made
    for wire in made:
        wire.close()


def frame(message: Any, encryptor: Any = None) -> bytes:
    """MESSAGE as pysyncobj's TcpConnection.send puts it on the wire."""
    data = zlib.compress(_pickle.dumps(message), 3)
    if encryptor is not None:
        data = encryptor.encrypt_at_time(data, int(monotonic()))
    return struct.pack("i", len(data)) + data


# -- pysyncobj is left as it is --------------------------------------------------------------------


def test_importing_the_controller_leaves_pysyncobj_as_it_is() -> None:
    """Nothing the controller imports assigns onto pysyncobj's modules or classes."""
    assert TcpConnection.__dict__["_TcpConnection__processRead"].__module__ == "pysyncobj.tcp_connection"
    assert (
        TcpConnection.__dict__["_TcpConnection__processParseMessage"].__module__ == "pysyncobj.tcp_connection"
    )
    assert TcpServer.__dict__["_TcpServer__onNewConnection"].__module__ == "pysyncobj.tcp_server"
    assert syncobj.createJournal is createJournal and serializer.atomicReplace is atomicReplace
    probe = """
import importlib, inspect, json, pkgutil, pysyncobj
modules = [pysyncobj] + [importlib.import_module("pysyncobj." + m.name)
                         for m in pkgutil.iter_modules(pysyncobj.__path__) if m.name != "syncobj_admin"]
spaces = {m.__name__: m.__dict__ for m in modules}
spaces.update({f"{m.__name__}.{n}": c.__dict__ for m in modules for n, c in vars(m).items()
               if inspect.isclass(c) and c.__module__ == m.__name__})
before = {name: dict(space) for name, space in spaces.items()}
import qonnect.controller.loop, qonnect.controller.cli
print(json.dumps(sorted(f"{name}.{key}" for name, space in spaces.items() for key, value in space.items()
                        if key not in before[name] or before[name][key] is not value)))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(out.stdout) == []


def test_a_plain_pysyncobj_connection_is_not_bounded(wires: list[Wire]) -> None:
    """The control: the same bytes a GuardedConnection refuses, pysyncobj's own connection buffers."""
    plain = Wire(TcpConnection)
    wires.append(plain)
    plain.feed(HUGE + os.urandom(PRE_AUTH_MAX_BYTES + 1024))
    assert plain.open and plain.conn.getSendBufferSize() == 0


# -- the bounds of a GuardedConnection ------------------------------------------------------------


def test_a_guarded_connection_closes_on_an_oversized_pre_auth_buffer(wires: list[Wire]) -> None:
    guarded = Wire(GuardedConnection)
    wires.append(guarded)
    guarded.feed(HUGE + os.urandom(PRE_AUTH_MAX_BYTES + 1024))
    assert not guarded.open and guarded.received == []


@pytest.mark.parametrize("length", [2**31 - 1, PRE_AUTH_MAX_BYTES, -5])
def test_a_guarded_connection_closes_on_a_frame_over_the_pre_auth_bound(
    wires: list[Wire], length: int
) -> None:
    guarded = Wire(GuardedConnection)
    wires.append(guarded)
    guarded.feed(struct.pack("i", length) + b"x" * 100)  # the header alone is enough
    assert not guarded.open


def test_a_guarded_connection_takes_small_frames_before_authentication(wires: list[Wire]) -> None:
    guarded = Wire(GuardedConnection)
    wires.append(guarded)
    guarded.feed(frame("127.0.0.1:4321") + frame(b"k" * 32))
    assert guarded.open and guarded.received == ["127.0.0.1:4321", b"k" * 32]
    assert not guarded.conn.qonnect_authenticated  # nothing decrypted: no encryptor


def test_after_a_message_decrypted_frames_up_to_the_frame_bound_pass(wires: list[Wire]) -> None:
    encryptor = getEncryptor(SECRET)
    guarded = Wire(GuardedConnection, encryptor)
    wires.append(guarded)
    big = os.urandom(4 * PRE_AUTH_MAX_BYTES)  # incompressible: its frame is as big
    guarded.feed(frame(b"k" * 32, encryptor))
    assert guarded.conn.qonnect_authenticated
    guarded.feed(frame(big, encryptor))
    assert guarded.open and guarded.received == [b"k" * 32, big]
    guarded.feed(struct.pack("i", MAX_FRAME_BYTES + 1))
    assert not guarded.open and not guarded.conn.qonnect_authenticated  # reset for a reconnect


def test_a_frame_that_does_not_decrypt_does_not_authenticate(wires: list[Wire]) -> None:
    guarded = Wire(GuardedConnection, getEncryptor(SECRET))
    wires.append(guarded)
    guarded.feed(frame(b"k" * 32, getEncryptor("another-secret-" * 3)))
    assert not guarded.open and not guarded.conn.qonnect_authenticated


# -- a node's transport guards its connections both ways ------------------------------------------


def test_a_nodes_connections_are_guarded_both_ways() -> None:
    """Outgoing (to a peer whose address sorts lower: pysyncobj connects to those) and incoming."""
    me = f"127.0.0.1:{free_port()}"
    node = RaftNode(me, ["127.0.0.1:1", f"127.0.0.1:{free_port()}"], SECRET, None, QUIET)
    try:
        transport = node._SyncObj__transport
        assert isinstance(transport._server, GuardedServer)
        outgoing = list(transport._connections.values())
        assert outgoing and all(isinstance(c, GuardedConnection) for c in outgoing)
        host, port = me.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            accepted = wait_for(lambda: list(transport._unknownConnections), 5, "the accepted connection")
            assert all(isinstance(c, GuardedConnection) for c in accepted)
            sock.sendall(HUGE + b"x" * 100)
            sock.settimeout(5)
            assert sock.recv(10) == b"", "an oversized pre-auth frame did not close the connection"
    finally:
        node.destroy_synchronous()
