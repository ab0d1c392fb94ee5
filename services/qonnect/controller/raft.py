"""The pysyncobj node: replicates the decision log (statemachine.DecisionLog) between replicas.

Only transport, election and persistence live here (etcd raftexample-style split): the state
machine is pure, and the controller loop decides what to propose. The node is pysyncobj's
``SyncObj`` with three parts of its own, one module each: the checks of its configuration (the
shared secret, addresses, the pysyncobj version: raft_config.py), what it promises is on disk
first (its journal, term, vote and full dump, and the ``AckGate`` that holds acknowledgements
until the journal is flushed: raft_durability.py) and the Raft port (who may connect and how much
a connection may send: raft_transport.py). What pysyncobj offers as options is used as such
(``transportClass``, ``bindAddress``); the rest are subclasses overriding its private methods,
and copies of two of its functions calling our journal and dump replace
(``raft_durability.with_names``), all used by this node only: importing the controller changes
nothing in pysyncobj's modules or classes (tests/unit/qonnect/controller/test_raft_transport.py).

The node flushes its journal at three points of every tick (``RaftNode._onTick``): before
pysyncobj's tick, which is where the leader counts matches towards the commit index, before the
tick waits for the network, and after it handled what arrived; and once a replica becomes leader
(a replica alone in its cluster commits its no-op entry in that same tick).

The server binds exactly the ``--self`` address (pysyncobj would bind 0.0.0.0:<port>), and a
bind failure stops the replica with an error naming the address instead of retrying silently.

Log replication follows Raft (section 5.3) where pysyncobj 0.3.17 does not: a follower keeps the
entries it holds with the leader's term (pysyncobj deleted everything after ``prevLogIdx``
whenever its log was longer, applied entries included, when the leader repeated entries after a
late answer: ``truncating already-applied log entries ... state machine may have diverged``,
issue 21), commits only entries the leader's message vouched for, and the leader does not move
a follower's next index back on a late acknowledgement (``RaftNode._append_entries``,
``RaftNode._next_node_idx``).

pysyncobj is used through private names (its message handler and state here), so only the tested
version range is accepted (``raft_config.TESTED_PYSYNCOBJ``).
"""

from __future__ import annotations

import errno
import os
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj import pickle as _pickle
from pysyncobj.monotonic import monotonic
from pysyncobj.syncobj import _RAFT_STATE, SyncObjException
from pysyncobj.syncobj import logger as _pysyncobj_log

from qonnect.controller.raft_config import RaftConfigError, check_address, check_pysyncobj_version
from qonnect.controller.raft_durability import AckGate, durable_syncobj_init
from qonnect.controller.raft_transport import GuardedTransport
from qonnect.controller.statemachine import DecisionLog

check_pysyncobj_version()  # RaftNode overrides pysyncobj's private methods


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
        durable_syncobj_init(  # SyncObj.__init__, with a DurableJournal and a DurableSerializer
            self, self_addr, others, conf=conf, consumers=[self.decisions], transportClass=GuardedTransport
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
