"""The Raft port: who may connect, how much a connection may send, and sends that wait for the disk.

Before authentication pysyncobj buffers whatever a connection sends (a frame header claiming
2 GiB, then megabytes, cost the leader seconds of CPU in quadratic byte concatenation and forced
an election). Here (``GuardedTransport``) only configured peers' addresses may connect, only a
configured peer may identify itself (no read-only nodes, no utility commands), a frame and the
per-connection buffer are bounded - tightly until the first authenticated message - and a frame
over the bound closes the connection (``GuardedConnection``). A connection that has not identified
itself as a configured peer within ``PRE_AUTH_TIMEOUT`` seconds is closed, and at most
``MAX_UNAUTHENTICATED`` such connections are held at once (idle connections from an allowed
address held one fd each for ever). The server binds exactly the ``--self`` address (the node
sets pysyncobj's ``bindAddress``).

Only this transport's connections are guarded: ``GuardedTransport`` (pysyncobj's
``transportClass`` option) creates a ``GuardedConnection`` for each outgoing connection
(``addNode``) and its ``GuardedServer`` one for each incoming connection
(``_TcpServer__onNewConnection``). ``GuardedConnection`` overrides pysyncobj's read and frame
parse steps (``_TcpConnection__processRead``, ``_TcpConnection__processParseMessage``: pysyncobj
calls them as ``self.__processRead()``, which finds the subclass's method). Nothing in pysyncobj's
modules or classes is changed: any other TcpConnection in the process behaves as pysyncobj wrote it.

``GuardedTransport.send`` hands a message that promises what may not be on disk yet to the node's
``AckGate`` (raft_durability.py).
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import struct
from typing import Any

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.monotonic import monotonic
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

from qonnect.controller.raft_config import check_pysyncobj_version

check_pysyncobj_version()  # the classes below override pysyncobj's private methods

log = logging.getLogger(__name__)

PRE_AUTH_MAX_BYTES = 64 * 1024  # a peer's first messages (key exchange, its address) are < 1 KiB
MAX_FRAME_BYTES = 64 * 1024 * 1024  # an authenticated peer's frame (entries, snapshot chunks)
PRE_AUTH_TIMEOUT = 5.0  # seconds a connection may take to finish the key exchange and identify
MAX_UNAUTHENTICATED = 32  # connections held at once before identification (peers need 1-2 each)


class GuardedConnection(TcpConnection):
    """pysyncobj's TCP connection with a bound on what it buffers and on the frames it accepts:
    ``PRE_AUTH_MAX_BYTES`` until a message decrypted (the sender holds the secret), then
    ``MAX_FRAME_BYTES``. Over the bound, the connection is closed."""

    # pysyncobj's private (untyped) state this class reads and writes
    _TcpConnection__socket: Any
    _TcpConnection__readBuffer: bytes | bytearray
    _TcpConnection__recvBufferSize: int

    qonnect_authenticated = False  # a message from this connection decrypted
    qonnect_accepted = 0.0  # when GuardedTransport accepted it (monotonic), for PRE_AUTH_TIMEOUT

    def disconnect(self) -> None:
        self.qonnect_authenticated = False  # an outgoing connection is reused to reconnect
        super().disconnect()

    def _TcpConnection__processRead(self) -> bool:
        """pysyncobj's read step, into a bytearray (appending to bytes copies it all: quadratic),
        with a bound on what the connection may have buffered unparsed."""
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or not incoming:
            self.disconnect()
            return False
        buffer = self._TcpConnection__readBuffer
        if not isinstance(buffer, bytearray):
            buffer = self._TcpConnection__readBuffer = bytearray(buffer)
        buffer += incoming
        limit = MAX_FRAME_BYTES + 4 if self.qonnect_authenticated else PRE_AUTH_MAX_BYTES
        if len(buffer) > limit:
            log.warning(
                "raft: closing a connection that sent %d bytes unparsed (limit %d)", len(buffer), limit
            )
            self.disconnect()
            return False
        return True

    def _TcpConnection__processParseMessage(self) -> Any:
        """pysyncobj's frame parser, refusing frame lengths over the bound before buffering them."""
        buffer = self._TcpConnection__readBuffer
        if len(buffer) < 4:
            return None
        length = struct.unpack("i", bytes(buffer[:4]))[0]
        limit = MAX_FRAME_BYTES if self.qonnect_authenticated else PRE_AUTH_MAX_BYTES - 4
        if length < 0 or length > limit:
            log.warning("raft: closing a connection announcing a %d-byte frame (limit %d)", length, limit)
            self.disconnect()
            return None
        if isinstance(buffer, bytearray):  # pysyncobj's parser and Fernet expect bytes
            self._TcpConnection__readBuffer = bytes(buffer)
        message = super()._TcpConnection__processParseMessage()
        if message is not None and self.encryptor is not None:
            self.qonnect_authenticated = True  # it decrypted: the sender holds the secret
        return message


class GuardedServer(TcpServer):
    """pysyncobj's TCP server, making a GuardedConnection of each connection it accepts."""

    def _TcpServer__onNewConnection(self, descr: int, event: int) -> None:
        """pysyncobj 0.3.17's accept step, with GuardedConnection for its TcpConnection."""
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, _addr = self._TcpServer__socket.accept()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._TcpServer__sendBufferSize)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._TcpServer__recvBufferSize)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                conn = GuardedConnection(
                    poller=self._TcpServer__poller,
                    socket=sock,
                    timeout=self._TcpServer__connectionTimeout,
                    sendBufferSize=self._TcpServer__sendBufferSize,
                    recvBufferSize=self._TcpServer__recvBufferSize,
                    keepalive=self._TcpServer__keepalive,
                )
                self._TcpServer__onNewConnectionCallback(conn)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.unbind()
                    return
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()


class GuardedTransport(TCPTransport):
    """Accepts connections only from configured peers' addresses, and only a configured peer's
    identity after the key exchange (no read-only nodes, no utility commands); every connection,
    outgoing or incoming, is a GuardedConnection."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self.allowed_hosts = set()
        for node in otherNodes:
            host = node.address.rsplit(":", 1)[0]
            self.allowed_hosts.add(globalDnsResolver().resolve(host) or host)

    # -- pysyncobj 0.3.17's construction of the server and of outgoing connections, guarded -------

    def _createServer(self) -> None:
        """pysyncobj's, with a GuardedServer."""
        conf = self._syncObj.conf
        if conf.bindAddress is not None:
            host, port = conf.bindAddress.rsplit(":", 1)
        elif getattr(self._selfNode, "address", None) is not None:
            host, port = self._selfNode.address.rsplit(":", 1)
            host = "::" if ":" in host else "0.0.0.0"
        else:
            raise RuntimeError("Unable to determine bind address")
        if host != "0.0.0.0":
            host = globalDnsResolver().resolve(host)
        self._server = GuardedServer(
            self._syncObj._poller,
            host,
            port,
            onNewConnection=self._onNewIncomingConnection,
            sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize,
            connectionTimeout=conf.connectionTimeout,
        )

    def addNode(self, node: Any) -> None:
        """pysyncobj's, with a GuardedConnection to a node this replica connects to."""
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if self._shouldConnect(node):
            conf = self._syncObj.conf
            conn = GuardedConnection(
                poller=self._syncObj._poller,
                timeout=conf.connectionTimeout,
                sendBufferSize=conf.sendBufferSize,
                recvBufferSize=conf.recvBufferSize,
                keepalive=conf.tcp_keepalive,
            )
            conn.encryptor = self._syncObj.encryptor
            conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
            self._connections[node] = conn

    # -- who may connect ------------------------------------------------------------------------

    def _onNewIncomingConnection(self, conn: Any) -> None:
        try:
            peer = conn._TcpConnection__socket.getpeername()[0]
        except OSError:
            peer = None
        if peer not in self.allowed_hosts:
            log.warning("raft: refused a connection from %s (not a configured peer)", peer)
            conn.disconnect()
            return
        self._expire_unauthenticated()
        if len(self._unknownConnections) >= MAX_UNAUTHENTICATED:
            self._refused_over_cap = getattr(self, "_refused_over_cap", 0) + 1
            if self._refused_over_cap in (1, 10, 100) or self._refused_over_cap % 1000 == 0:
                log.warning(
                    "raft: refused a connection from %s: %d connections have not authenticated "
                    "yet (limit %d; %d refused so far)",
                    peer,
                    len(self._unknownConnections),
                    MAX_UNAUTHENTICATED,
                    self._refused_over_cap,
                )
            conn.disconnect()
            return
        conn.qonnect_accepted = monotonic()
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:
        super()._onTick()
        self._expire_unauthenticated()

    def _expire_unauthenticated(self) -> None:
        """Close connections that have not identified as a peer within PRE_AUTH_TIMEOUT."""
        deadline = monotonic() - PRE_AUTH_TIMEOUT
        stale = [c for c in self._unknownConnections if c.qonnect_accepted < deadline]
        for conn in stale:
            conn.disconnect()
            self._unknownConnections.discard(conn)
        if stale:
            log.warning(
                "raft: closed %d connection(s) that did not authenticate within %.0fs",
                len(stale),
                PRE_AUTH_TIMEOUT,
            )

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        if self._syncObj.encryptor and not conn.sendRandKey:
            super()._onIncomingMessageReceived(conn, message)
            return
        if not isinstance(message, str) or message not in self._nodeAddrToNode:
            log.warning(
                "raft: refused a connection that identified as %r (not a configured peer)", str(message)[:80]
            )
            conn.disconnect()
            self._unknownConnections.discard(conn)
            return
        super()._onIncomingMessageReceived(conn, message)

    # -- sends that wait for the disk -----------------------------------------------------------

    def send(self, node: Any, message: Any) -> bool:
        """pysyncobj's send, except that the node's AckGate keeps a message that promises what
        is not on disk yet (and what follows it) until the journal is flushed."""
        gate = getattr(self._syncObj, "gate", None)
        if gate is not None and gate.hold(super().send, node, message):
            return True
        return bool(super().send(node, message))
