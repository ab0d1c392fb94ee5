"""The pysyncobj node: replicates the decision log (statemachine.DecisionLog) between replicas.

Only transport, election and persistence live here (etcd raftexample-style split): the state
machine is pure, and the controller loop decides what to propose.

pysyncobj's wire format is pickle; with a password it is Fernet-encrypted and authenticated
(HMAC checked before anything is unpickled), so a shared secret is mandatory: a node refuses to
start without one, or with one shorter than 32 bytes or visibly not random.

A replica tells a peer it holds entries (a successful ``next_node_idx``) or asks for or grants a
vote only once its journal is on disk, and a leader counts its own entries towards a commit only
then (issue 38; etcd's raftexample saves its WAL before it sends). pysyncobj writes the journal
through mmap and never flushes it, so a power cut could lose acknowledged, committed entries and
the replica would vote as if it never had them. How: pysyncobj's journal factory
(``pysyncobj.syncobj.createJournal``) makes a ``DurableJournal``, which notes whether anything was
written since its last flush and stores term and vote with fsync (the file before the rename, its
directory after). ``GuardedTransport.send`` hands such a message to the node's ``AckGate`` while
the journal has unflushed writes; the gate flushes the journal once (msync) and sends what it held,
in order, at three points of every tick (``RaftNode._onTick``): before pysyncobj's tick, which is
where the leader counts matches towards the commit index, before the tick waits for the network,
and after it handled what arrived; and once a replica becomes leader (a replica alone in its
cluster commits its no-op entry in that same tick). One flush thus covers every entry written in a
tick, however many messages brought them. A flush that fails stops the replica
(``stop_after_lost_writes``): a later one could succeed without the lost writes. The full dump is
replaced durably too (``pysyncobj.serializer.atomicReplace``): log compaction and a snapshot from
the leader truncate the journal once it is written. Left as it was: a power cut in the middle of an
unflushed write can leave a torn record after the durable ones, which pysyncobj's format (no
checksum) does not detect. The controller also writes every decision to the KB before acting on it:
every replica can still lose its disk at once.

Before authentication pysyncobj buffers whatever a connection sends (a frame header claiming
2 GiB, then megabytes, cost the leader seconds of CPU in quadratic byte concatenation and forced
an election). Here (``GuardedTransport``) only configured peers' addresses may connect, only a
configured peer may identify itself (no read-only nodes, no utility commands), a frame and the
per-connection buffer are bounded - tightly until the first authenticated message - and a frame
over the bound closes the connection. A connection that has not identified itself as a configured
peer within ``PRE_AUTH_TIMEOUT`` seconds is closed, and at most ``MAX_UNAUTHENTICATED`` such
connections are held at once (idle connections from an allowed address held one fd each for ever).

The server binds exactly the ``--self`` address (pysyncobj would bind 0.0.0.0:<port>), and a
bind failure stops the replica with an error naming the address instead of retrying silently.

Log replication follows Raft (section 5.3) where pysyncobj 0.3.17 does not: a follower keeps the
entries it holds with the leader's term (pysyncobj deleted everything after ``prevLogIdx``
whenever its log was longer, applied entries included, when the leader repeated entries after a
late answer: ``truncating already-applied log entries ... state machine may have diverged``,
issue 21), commits only entries the leader's message vouched for, and the leader does not move
a follower's next index back on a late acknowledgement (``RaftNode._append_entries``,
``RaftNode._next_node_idx``).

pysyncobj is used through private names (its transport, its TCP connection, its message handler
and state, its journal's meta storer, its journal factory and dump replace), so only the tested
version range is accepted (``TESTED_PYSYNCOBJ``).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj import pickle as _pickle
from pysyncobj import serializer as _serializer
from pysyncobj import syncobj as _syncobj
from pysyncobj import tcp_connection as _tcp
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.journal import FileJournal, MemoryJournal, MetaStorer
from pysyncobj.monotonic import monotonic
from pysyncobj.syncobj import _RAFT_STATE, SyncObjException
from pysyncobj.syncobj import logger as _pysyncobj_log
from pysyncobj.transport import TCPTransport

from qonnect.controller.statemachine import DecisionLog
from qonnect.errors import UserError
from qonnect.versions import require_tested

log = logging.getLogger(__name__)

MIN_SECRET_BYTES = 32
MIN_SECRET_DISTINCT = 12  # 32 bytes from a CSPRNG (hex, base64) have far more distinct characters
PRE_AUTH_MAX_BYTES = 64 * 1024  # a peer's first messages (key exchange, its address) are < 1 KiB
MAX_FRAME_BYTES = 64 * 1024 * 1024  # an authenticated peer's frame (entries, snapshot chunks)
PRE_AUTH_TIMEOUT = 5.0  # seconds a connection may take to finish the key exchange and identify
MAX_UNAUTHENTICATED = 32  # connections held at once before identification (peers need 1-2 each)
TESTED_PYSYNCOBJ = ((0, 3, 17), (0, 3, 18))  # [lowest, first untested): keep in step with pyproject


class RaftConfigError(UserError, ValueError):
    """Bad replica configuration (missing secret, bad address): a user error, not a crash."""


def check_pysyncobj_version(installed: str | None = None) -> None:
    """Refuse a pysyncobj outside the tested range: this module overrides its private methods."""
    require_tested("pysyncobj", TESTED_PYSYNCOBJ, RaftConfigError, "the controller", installed=installed)


check_pysyncobj_version()


def read_secret(path: str | os.PathLike[str] | None) -> str:
    """Read the shared Raft secret; refuse a missing, empty, short or world-readable file."""
    if not path:
        raise RaftConfigError(
            "--raft-secret-file is required: without a shared secret pysyncobj "
            "accepts unauthenticated pickle from anyone who can reach the port"
        )
    file = Path(path)
    try:
        mode = file.stat().st_mode
        secret = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RaftConfigError(f"--raft-secret-file {path}: cannot read ({exc.strerror})") from None
    if mode & 0o077:
        raise RaftConfigError(
            f"--raft-secret-file {path}: permissions {oct(mode & 0o777)} let other "
            "users read the secret; expected 0600 or stricter"
        )
    if len(secret.encode()) < MIN_SECRET_BYTES:
        raise RaftConfigError(
            f"--raft-secret-file {path}: secret must be at least {MIN_SECRET_BYTES} bytes "
            "(generate one: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        raise RaftConfigError(
            f"--raft-secret-file {path}: secret is not random (only {len(set(secret))} "
            "distinct characters); generate one: python -c 'import secrets; "
            "print(secrets.token_hex(32))'"
        )
    return secret


def check_address(value: str, field: str) -> str:
    """A HOST:PORT string with a numeric port in range."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RaftConfigError(f"{field}: expected HOST:PORT with a port in 1..65535, got {value!r}")
    return value


# -- durability (issue 38) -----------------------------------------------------------------------

# messages that tell a peer what this replica holds or decided: a vote request or a granted vote
VOTES = frozenset({"request_vote", "response_vote"})


def promises_durability(message: Any) -> bool:
    """True for a message a peer may count on after a power cut here: an acknowledgement of
    appended entries (a successful ``next_node_idx``), a vote request or a granted vote."""
    if not isinstance(message, dict):
        return False
    kind = message.get("type")
    return kind in VOTES or (kind == "next_node_idx" and bool(message.get("success")))


def fsync_dir(path: str) -> None:
    """Make the directory entry of PATH durable (a new or renamed file is not, until then)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(tmp: str, path: str) -> None:
    """Replace PATH by TMP so that a power cut leaves one of them whole and, once this returns,
    the new one: pysyncobj renames its full dump into place without fsync."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path)


class DurableMetaStorer(MetaStorer):
    """pysyncobj's store of term, vote and commit index, written with fsync: a vote (rare) must
    survive a power cut before the candidate hears of it, and a rename of a file not yet on disk
    can leave an empty one in place of the vote stored before."""

    def storeMeta(self, meta: dict[str, Any]) -> None:
        path = self.getPath()
        with open(path + ".tmp", "wb") as tmp:
            tmp.write(_pickle.dumps(meta))
        durable_replace(path + ".tmp", path)


class DurableJournal(FileJournal):
    """pysyncobj's memory-mapped journal, plus what a flush needs to be rare: whether anything
    was written since the last one (``dirty``); ``sync`` is called by the node's AckGate. Term,
    vote and commit index go through a DurableMetaStorer."""

    def __init__(self, journal_file: str) -> None:
        self.dirty = True  # a new journal's header (pysyncobj adds its first entry next)
        super().__init__(journal_file)
        self._FileJournal__metaStorer = DurableMetaStorer(journal_file + ".meta")
        fsync_dir(journal_file)  # the journal file may have just been created

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.dirty = True

    def clear(self) -> None:
        super().clear()
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def sync(self) -> bool:
        """Put every write so far on disk with one msync(MS_SYNC) of the mapping (on Linux an
        fdatasync of the file's range: data and the file size); False when there was none."""
        if not self.dirty:
            return False
        self.flush()
        self.dirty = False
        return True


def create_journal(journal_file: str | None = None) -> Any:
    """pysyncobj's journal factory (``createJournal``), with a DurableJournal for a file."""
    return MemoryJournal() if journal_file is None else DurableJournal(journal_file)


_syncobj.createJournal = create_journal
_serializer.atomicReplace = durable_replace


def stop_after_lost_writes(exc: OSError) -> NoReturn:
    """A failed flush may have dropped journal writes, and a later one can succeed without them
    (Linux reports a lost writeback once): acknowledging after it could promise what is gone,
    so the replica stops, as etcd and PostgreSQL do. What it held was never acknowledged."""
    log.critical("raft: the journal could not be flushed to disk (%s); stopping this replica", exc)
    os._exit(os.EX_IOERR)  # a handler flushes each record it writes


class AckGate:
    """Holds the messages that promise durability while the journal has unflushed writes, and
    releases them, in the order they were sent, after one flush (``open``): entries written in
    one tick, however many messages brought them, cost one flush."""

    def __init__(self, journal: Callable[[], Any], enabled: bool = True) -> None:
        self._journal = journal  # the node's journal, read when needed (pysyncobj creates it)
        self.enabled = enabled  # False only to measure what the flush costs (the benchmark)
        self._held: list[tuple[Callable[[Any, Any], Any], Any, Any]] = []
        self.flushes = 0

    def hold(self, send: Callable[[Any, Any], Any], node: Any, message: Any) -> bool:
        """Keep MESSAGE for ``open`` if it must wait for the flush or follows one that waits."""
        if not self._held and not (promises_durability(message) and self._unflushed()):
            return False
        self._held.append((send, node, message))
        return True

    def open(self) -> None:
        """Flush the journal if it has unflushed writes, then send what was held."""
        journal = self._durable_journal()
        try:
            synced = journal is not None and journal.sync()
        except OSError as exc:
            stop_after_lost_writes(exc)
        if synced:
            self.flushes += 1
        held, self._held = self._held, []
        for send, node, message in held:
            send(node, message)

    def _unflushed(self) -> bool:
        journal = self._durable_journal()
        return journal is not None and journal.dirty

    def _durable_journal(self) -> DurableJournal | None:
        journal = self._journal() if self.enabled else None
        return journal if isinstance(journal, DurableJournal) else None


# -- transport hardening --------------------------------------------------------------------------


def _guarded_read(self: Any) -> bool:
    """pysyncobj's read step with a bound on what one connection may have buffered."""
    sock = self._TcpConnection__socket
    try:
        incoming = sock.recv(self._TcpConnection__recvBufferSize)
    except OSError as e:
        if e.errno not in (_tcp.socket.errno.EAGAIN, _tcp.socket.errno.EWOULDBLOCK):
            self.disconnect()
        return False
    if sock.getsockopt(_tcp.socket.SOL_SOCKET, _tcp.socket.SO_ERROR) or not incoming:
        self.disconnect()
        return False
    buffer = self._TcpConnection__readBuffer
    if not isinstance(buffer, bytearray):  # appending to bytes copies it all: quadratic
        buffer = self._TcpConnection__readBuffer = bytearray(buffer)
    buffer += incoming
    limit = MAX_FRAME_BYTES + 4 if getattr(self, "qonnect_authenticated", False) else PRE_AUTH_MAX_BYTES
    if len(buffer) > limit:
        log.warning("raft: closing a connection that sent %d bytes unparsed (limit %d)", len(buffer), limit)
        self.disconnect()
        return False
    return True


def _guarded_parse(self: Any) -> Any:
    """pysyncobj's frame parser, refusing frame lengths over the bound before buffering them."""
    buffer = self._TcpConnection__readBuffer
    if len(buffer) < 4:
        return None
    length = _tcp.struct.unpack("i", bytes(buffer[:4]))[0]
    limit = MAX_FRAME_BYTES if getattr(self, "qonnect_authenticated", False) else PRE_AUTH_MAX_BYTES - 4
    if length < 0 or length > limit:
        log.warning("raft: closing a connection announcing a %d-byte frame (limit %d)", length, limit)
        self.disconnect()
        return None
    if isinstance(buffer, bytearray):  # pysyncobj's parser and Fernet expect bytes
        self._TcpConnection__readBuffer = bytes(buffer)
    message = _original_parse(self)
    if message is not None and self.encryptor is not None:
        self.qonnect_authenticated = True  # it decrypted: the sender holds the secret
    return message


_original_parse = _tcp.TcpConnection._TcpConnection__processParseMessage
_tcp.TcpConnection._TcpConnection__processRead = _guarded_read
_tcp.TcpConnection._TcpConnection__processParseMessage = _guarded_parse


class GuardedTransport(TCPTransport):
    """Accepts connections only from configured peers' addresses, and only a configured peer's
    identity after the key exchange (no read-only nodes, no utility commands)."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self.allowed_hosts = set()
        for node in otherNodes:
            host = node.address.rsplit(":", 1)[0]
            self.allowed_hosts.add(globalDnsResolver().resolve(host) or host)

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
        stale = [c for c in self._unknownConnections if getattr(c, "qonnect_accepted", 0.0) < deadline]
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

    def send(self, node: Any, message: Any) -> bool:
        """pysyncobj's send, except that the node's AckGate keeps a message that promises what
        is not on disk yet (and what follows it) until the journal is flushed."""
        gate = getattr(self._syncObj, "gate", None)
        if gate is not None and gate.hold(super().send, node, message):
            return True
        return bool(super().send(node, message))


@dataclass(frozen=True)
class Timing:
    """Raft timing. Defaults give re-election well under 2 s and a deposed leader stepping down
    after 1.5 s without a majority (pysyncobj's default is 30 s)."""

    tick: float = 0.05
    election_min: float = 0.7
    election_max: float = 1.4
    heartbeat: float = 0.1
    leader_fallback: float = 1.5
    connection_timeout: float = 2.0
    connection_retry: float = 0.5


class ReplicatedDecisions(SyncObjConsumer):
    """pysyncobj consumer holding the DecisionLog; one replicated entry point for all commands."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = DecisionLog()
        self.applied = 0  # commands applied by this replica since start or snapshot load

    @replicated
    def submit(self, cmd: dict[str, Any]) -> dict[str, Any]:
        try:
            result = self.machine.apply(cmd)
        except ValueError as exc:  # a malformed command is refused identically on every replica
            result = {"ok": False, "why": str(exc)}
        self.applied += 1
        return result

    def _serialize(self) -> dict[str, Any]:
        return {"machine": self.machine.to_dict(), "applied": self.applied}

    def _deserialize(self, data: dict[str, Any]) -> None:
        self.machine = DecisionLog.from_dict(data["machine"])
        self.applied = int(data.get("applied", 0))


class RaftNode(SyncObj):
    """One replica of the decision log."""

    # pysyncobj's private (untyped) state this class reads and writes
    _SyncObj__raftElectionDeadline: float  # next election time
    _SyncObj__raftLeader: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__leaderCommitIndex: int | None
    _SyncObj__recvTransmission: Any
    _SyncObj__transferInProgress: bool

    def __init__(
        self,
        self_addr: str,
        peers: list[str],
        secret: str,
        data_dir: str | os.PathLike[str] | None,
        timing: Timing | None = None,
        durable: bool = True,
    ) -> None:
        """``durable=False`` acknowledges entries before they are on disk, as pysyncobj does:
        only for benchmarks/raft_commit.py, to measure what the flush costs."""
        if not secret:
            raise RaftConfigError("a Raft secret is required")
        timing = timing or Timing()
        check_address(self_addr, "--self")
        others = [check_address(p, "--peers") for p in peers if p != self_addr]
        journal = dump = None
        if data_dir is not None:
            Path(data_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            journal = str(Path(data_dir) / "raft.journal")
            dump = str(Path(data_dir) / "raft.dump")
        conf = SyncObjConf(
            password=secret,
            autoTickPeriod=timing.tick,
            raftMinTimeout=timing.election_min,
            raftMaxTimeout=timing.election_max,
            appendEntriesPeriod=timing.heartbeat,
            leaderFallbackTimeout=timing.leader_fallback,
            connectionTimeout=timing.connection_timeout,
            connectionRetryTime=timing.connection_retry,
            journalFile=journal,
            fullDumpFile=dump,
            logCompactionMinEntries=2000,
            logCompactionMinTime=600,
            useFork=False,
            bindAddress=self_addr,
            maxBindRetries=1,
        )
        busy = bind_failure(self_addr)  # before pysyncobj tries: it logs a traceback and no reason
        if busy:
            raise RaftBindError(self_addr, busy)
        # set before SyncObj.__init__, which leaves attributes it finds out of its snapshots
        self.decisions = ReplicatedDecisions()
        self.peers = others
        self.gate = AckGate(lambda: self._SyncObj__raftLog, enabled=durable)
        super().__init__(
            self_addr, others, conf=conf, consumers=[self.decisions], transportClass=GuardedTransport
        )
        self.addOnTickCallback(self.gate.open)  # the last step of a tick before it waits for I/O
        try:
            self.waitBinded()
        except SyncObjException:
            self.destroy()
            raise RaftBindError(self_addr, bind_failure(self_addr) or "bind failed") from None

    # -- durable acknowledgements ----------------------------------------------------------------

    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj's tick between two flush points of the gate: the leader counts its own
        entries towards a commit at the start of the tick, only once they are on disk, and what
        the tick's poll received is acknowledged at its end (pysyncobj calls every hook, sends
        included, on this one thread)."""
        self.gate.open()
        try:
            super()._onTick(timeToWait)
        finally:
            self.gate.open()

    def _SyncObj__onBecomeLeader(self) -> None:
        """pysyncobj's, then a flush of the no-op entry it appends: a replica alone in its
        cluster becomes leader and counts that entry towards a commit in the same tick."""
        super()._SyncObj__onBecomeLeader()
        self.gate.open()

    # -- fast failover --------------------------------------------------------------------------

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:
        """When the leader's connection drops (its process died: the kernel reset the socket),
        start the election soon instead of waiting out the full election timeout. Raft allows an
        early election at any time (it only costs liveness, never safety); a partition does not
        drop connections, so there the normal timeout and leaderFallbackTimeout apply."""
        super()._SyncObj__onNodeDisconnected(node)
        if node == self._getLeader() and not self._isLeader():
            soon = monotonic() + random.uniform(0.02, 0.4)
            if soon < self._SyncObj__raftElectionDeadline:
                self._SyncObj__raftElectionDeadline = soon

    # -- log replication (Raft 5.3), replacing pysyncobj's follower and leader bookkeeping ------

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """Entries appended by the leader, and the leader's view of a follower's log, handled as
        Raft (section 5.3) says; everything else is pysyncobj's.

        pysyncobj 0.3.17's follower deletes every entry after ``prevLogIdx`` whenever its log is
        longer, even when those entries match the leader's. The leader resends a suffix the
        follower already holds whenever it sees a reply late (a ``next_node_idx`` success that
        moves its optimistic next index back, or a stale reset), which under load and leader
        churn is routine; the follower then deleted entries it had already applied, logging
        ``truncating already-applied log entries ... state machine may have diverged``, acked
        less than it held and, until the entries came back, could vote as if it lacked them."""
        if isinstance(message, dict):
            kind = message.get("type")
            if (
                kind == "append_entries"
                and "prevLogIdx" in message
                and message["term"] >= self._SyncObj__raftCurrentTerm
            ):
                self._append_entries(node, message)
                return
            if kind == "next_node_idx" and self._SyncObj__raftState == _RAFT_STATE.LEADER:
                self._next_node_idx(node, message)
                return
        super()._SyncObj__onMessageReceived(node, message)

    def _append_entries(self, node: Any, message: dict[str, Any]) -> None:
        """pysyncobj's append-entries branch, except that an entry already in the log with the
        same term is kept: only the first conflicting entry and those after it are deleted, and
        the commit index never covers entries past the last one this message vouched for."""
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False  # a newer leader supersedes a transfer
        if not self._SyncObj__transferInProgress:
            self._SyncObj__raftElectionDeadline = monotonic() + self._SyncObj__generateRaftTimeout()
        if self._SyncObj__raftLeader != node:
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = node
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__setCurrentTerm(message["term"], None)
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        self._SyncObj__leaderCommitIndex = leader_commit = message["commit_index"]
        entries = self._reassembled(message)
        if entries is None:  # a chunk of one big entry: acknowledged, nothing appended yet
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=False)
            return
        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        held = self._SyncObj__getEntries(prev_idx)
        if not held:
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return
        if held[0][2] != prev_term:
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_idx, success=False, reset=True)
            return
        self._merge(prev_idx, held[1:], entries)
        last_new = prev_idx + len(entries)  # the log matches the leader's up to here
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=last_new + 1, success=True)

        commit = min(self._SyncObj__raftCommitIndex, self._SyncObj__getCurrentLogIndex())
        if leader_commit > commit:
            commit = max(commit, min(leader_commit, last_new))
        self._SyncObj__raftCommitIndex = commit
        self._SyncObj__raftLog.setRaftCommitIndex(commit)

    def _reassembled(self, message: dict[str, Any]) -> list[Any] | None:
        """The message's entries; None while an entry too big for one frame arrives in chunks."""
        transmission = message.get("transmission")
        if transmission is None:
            return list(message.get("entries", []))
        if transmission == "start":
            self._SyncObj__recvTransmission = message["data"]
            return None
        if transmission not in ("process", "finish"):
            raise ValueError(f"unknown append_entries transmission {transmission!r}")
        self._SyncObj__recvTransmission += message["data"]
        if transmission == "process":
            return None
        entry = _pickle.loads(self._SyncObj__recvTransmission)
        self._SyncObj__recvTransmission = ""
        return [entry]

    def _merge(self, prev_idx: int, after: list[Any], entries: list[Any]) -> None:
        """Raft 5.3 steps 3-4: ``after`` (the log past ``prev_idx``) keeps every entry that has
        the term of the message's entry at its index; from the first that does not, the log is
        replaced by the message's entries. Nothing is deleted when every entry matches."""
        same = 0
        while same < len(after) and same < len(entries) and after[same][2] == entries[same][2]:
            same += 1
        dynamic = self._SyncObj__conf.dynamicMembershipChange
        if same < len(after) and same < len(entries):  # a conflict: drop it and what follows
            cut = prev_idx + 1 + same
            if dynamic:
                for entry in reversed(after[same:]):
                    change = self._SyncObj__parseChangeClusterRequest(entry[0])
                    if change is not None:
                        self._SyncObj__doChangeCluster(change, reverse=True)
            if cut <= self._SyncObj__raftLastApplied:  # only a real safety violation gets here
                _pysyncobj_log.critical(
                    "truncating already-applied log entries from index %d (last applied: %d) - "
                    "state machine may have diverged from other cluster members",
                    cut,
                    self._SyncObj__raftLastApplied,
                )
            self._SyncObj__deleteEntriesFrom(cut)
        for entry in entries[same:]:
            self._SyncObj__raftLog.add(*entry)
            if dynamic:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)

    def _next_node_idx(self, node: Any, message: dict[str, Any]) -> None:
        """pysyncobj's leader bookkeeping, except that a late success never moves the next index
        back: the entries after it were already sent (a loss shows up as a reset reply)."""
        next_idx = message["next_node_idx"]
        if message["reset"]:
            self._SyncObj__raftNextIndex[node] = next_idx
        if message["success"] and self._SyncObj__raftMatchIndex[node] < next_idx - 1:
            self._SyncObj__raftMatchIndex[node] = next_idx - 1
            if self._SyncObj__raftNextIndex[node] < next_idx:
                self._SyncObj__raftNextIndex[node] = next_idx
        self._SyncObj__lastResponseTime[node] = monotonic()

    # -- views used by the controller --------------------------------------------------------

    @property
    def machine(self) -> DecisionLog:
        return self.decisions.machine

    @property
    def node_id(self) -> str:
        return self.selfNode.id

    def is_leader(self) -> bool:
        return bool(self._isLeader())

    def leader(self) -> str | None:
        """The leader as far as this replica knows; None if it is another replica it cannot reach
        (pysyncobj keeps naming a dead leader while no election can start)."""
        node = self._getLeader()
        if node is None or (node != self.selfNode and not self.isNodeConnected(node)):
            return None
        return node.id

    def term(self) -> int:
        return int(self.raftCurrentTerm)

    def peer_status(self) -> dict[str, bool]:
        """Each peer and whether this replica has a live connection to it."""
        return {p.id: bool(self.isNodeConnected(p)) for p in self.otherNodes}

    def propose(self, cmd: dict[str, Any], timeout: float = 3.0) -> dict[str, Any]:
        """Commit a command and return its result once applied here; raises on timeout or loss
        of leadership (the command may still commit later, so callers re-read the state)."""
        stamped = dict(cmd, term=self.term(), node=self.node_id)
        stamped.setdefault("ts", time.time())
        try:
            return self.decisions.submit(stamped, sync=True, timeout=timeout)
        except SyncObjException as exc:
            raise ProposalError(f"not committed: {_fail_reason(exc)}") from None


class RaftBindError(RaftConfigError):
    """The Raft port could not be bound on the --self address: the replica cannot join."""

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        super().__init__(f"--self {address}: cannot listen for Raft peers there ({reason})")


def bind_failure(address: str) -> str | None:
    """Why ADDRESS cannot be bound now, as the OS says it, or None if it can."""
    host, _sep, port = address.rpartition(":")
    try:
        family = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        return exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
    return None


class ProposalError(RuntimeError):
    """A proposal did not commit in time (no quorum, lost leadership, timeout)."""


def _fail_reason(exc: SyncObjException) -> str:
    names = {
        0: "success",
        1: "queue full",
        2: "missing leader",
        3: "discarded",
        4: "not leader",
        5: "leader changed",
        6: "request denied",
    }
    code = exc.errorCode
    return names.get(code, str(code)) if isinstance(code, int) else str(code)
