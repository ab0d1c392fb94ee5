"""A replica acknowledges entries, votes, and a leader counts its own entries, only once they are
on disk (issue 38).

pysyncobj writes its journal through mmap and never flushes it. A power cut is simulated the way
POSIX allows it to happen: the disk holds the journal as it was at its last flush (an msync of
the mapping, ``ResizableFile.flush``) and nothing written after. The flush is wrapped to keep a
copy of the file's bytes each time; what leaves through the transport and when a leader moves
its commit index are recorded in the same event list, so every acknowledgement can be checked
against the journal the disk held when it was sent.
"""

from __future__ import annotations

import itertools
import os
import queue
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import pickle as _pickle
from pysyncobj.journal import FIRST_RECORD_OFFSET, LAST_RECORD_OFFSET_OFFSET, FileJournal, ResizableFile
from pysyncobj.transport import TCPTransport
from qonnect.controller.raft import RaftNode, Timing
from qonnect.controller.raft_durability import (
    AckGate,
    DurableJournal,
    DurableSerializer,
    durable_replace,
    torn_tail,
)
from support import free_port, wait_for

NO_OP = b"\x01"  # pysyncobj's no-op command: applying it touches no state machine
SECRET = "s3cr3t-" * 6
QUIET = Timing(election_min=600, election_max=1200, leader_fallback=1300, connection_timeout=1300)
_images = itertools.count()


class Disk:
    """What a power cut would leave: the journal's bytes at each flush, in one event list with
    the messages that left the replica and the commit indexes a leader stored."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        self.events: list[tuple[str, Any]] = []
        flush, commit = ResizableFile.flush, FileJournal.setRaftCommitIndex
        events = self.events

        def flushed(file: Any) -> None:
            flush(file)
            path = Path(file._ResizableFile__fileName)
            if path.is_relative_to(folder):  # this test's replicas only
                events.append(("flush", path.read_bytes()))

        def sent(transport: Any, node: Any, message: Any) -> bool:
            events.append(("send", message))
            return True

        def committed(journal: Any, index: int) -> None:
            events.append(("commit", index))
            commit(journal, index)

        monkeypatch.setattr(ResizableFile, "flush", flushed)
        monkeypatch.setattr(TCPTransport, "send", sent)
        monkeypatch.setattr(FileJournal, "setRaftCommitIndex", committed)

    def sent(self, kind: str) -> list[dict[str, Any]]:
        return [e[1] for e in list(self.events) if e[0] == "send" and e[1].get("type") == kind]

    def durable_at(self, position: int) -> bytes | None:
        """The journal on disk just after event POSITION: the last flush up to it, if any."""
        flushes = [e[1] for e in self.events[: position + 1] if e[0] == "flush"]
        return flushes[-1] if flushes else None

    def acks(self) -> list[tuple[int, int]]:
        """(event position, last index acknowledged) of every successful append answer."""
        return [
            (i, e[1]["next_node_idx"] - 1)
            for i, e in enumerate(list(self.events))
            if e[0] == "send" and e[1].get("type") == "next_node_idx" and e[1]["success"]
        ]


def entries_in(image: bytes | None, folder: Path) -> list[tuple[int, int]]:
    """(index, term) of the entries pysyncobj reads from a journal holding IMAGE."""
    if image is None:
        return []
    path = folder / f"image-{next(_images)}.journal"
    path.write_bytes(image)
    journal = FileJournal(str(path))
    try:
        return [(e[1], e[2]) for e in journal]
    finally:
        journal._destroy()


class Follower:
    """A replica with its journal on disk whose peers never answer; messages from the 'leader'
    peer are delivered on the replica's own tick thread, a batch at a time (one tick)."""

    def __init__(self, data_dir: Path, durable: bool = True) -> None:
        self.data_dir = data_dir
        self.peers = [f"127.0.0.1:{free_port()}" for _i in range(2)]
        self.node = RaftNode(f"127.0.0.1:{free_port()}", self.peers, SECRET, data_dir, QUIET, durable)
        self.leader, self.other = sorted(self.node.otherNodes, key=lambda n: n.id)
        self.inbox: queue.Queue[tuple[list[tuple[Any, dict[str, Any]]], threading.Event]] = queue.Queue()
        self.node.addOnTickCallback(self._deliver)

    def _deliver(self) -> None:
        while not self.inbox.empty():
            batch, done = self.inbox.get()
            for sender, message in batch:
                self.node._SyncObj__onMessageReceived(sender, message)
            done.set()

    def deliver(self, *batch: tuple[Any, dict[str, Any]]) -> None:
        """Hand BATCH to the replica in one tick and wait until it was handled."""
        done = threading.Event()
        self.inbox.put((list(batch), done))
        assert done.wait(5), "the tick thread did not deliver the messages"

    def append(
        self, term: int, prev: tuple[int, int], entries: list[tuple[int, int]], commit: int
    ) -> tuple[Any, dict[str, Any]]:
        return self.leader, {
            "type": "append_entries",
            "term": term,
            "commit_index": commit,
            "entries": [(NO_OP, idx, t) for idx, t in entries],
            "prevLogIdx": prev[0],
            "prevLogTerm": prev[1],
        }


@pytest.fixture()
def disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Disk:
    return Disk(monkeypatch, tmp_path)


@pytest.fixture()
def follower(tmp_path: Path, disk: Disk) -> Iterator[Follower]:
    f = Follower(tmp_path / "replica")
    try:
        yield f
    finally:
        f.node.destroy_synchronous()


def restart_from(image: bytes | None, folder: Path, peers: list[str]) -> list[tuple[int, int]]:
    """Start a replica on a data folder holding only journal IMAGE; (index, term) of its log."""
    folder.mkdir()
    if image is not None:
        (folder / "raft.journal").write_bytes(image)
    node = RaftNode(f"127.0.0.1:{free_port()}", peers, SECRET, folder, QUIET)
    try:
        return [(e[1], e[2]) for e in node._SyncObj__raftLog]
    finally:
        node.destroy_synchronous()


def acknowledge_seven(follower: Follower, disk: Disk) -> None:
    """Entries 2..7 of term 1, in two appends, each answered with success."""
    follower.deliver(follower.append(1, (1, 0), [(2, 1), (3, 1), (4, 1), (5, 1)], commit=1))
    follower.deliver(follower.append(1, (5, 1), [(6, 1), (7, 1)], commit=5))
    wait_for(lambda: [last for _i, last in disk.acks()] == [5, 7], 5, "both appends acknowledged")


# -- (a) a power cut loses nothing that was acknowledged ------------------------------------------


def test_acknowledged_entries_survive_a_power_cut(follower: Follower, disk: Disk, tmp_path: Path) -> None:
    acknowledge_seven(follower, disk)
    for position, last in disk.acks():
        on_disk = entries_in(disk.durable_at(position), tmp_path)
        assert [(i, 1) for i in range(2, last + 1)] == [e for e in on_disk if 1 < e[0] <= last], (
            f"entries up to {last} acknowledged while the disk held {on_disk}"
        )
    position, _last = disk.acks()[-1]  # the power goes off just after the last answer left
    log = restart_from(disk.durable_at(position), tmp_path / "after-power-cut", follower.peers)
    assert log[:7] == [(1, 0)] + [(i, 1) for i in range(2, 8)]


def test_the_simulated_power_cut_loses_entries_acknowledged_without_the_flush(
    disk: Disk, tmp_path: Path
) -> None:
    """The check above can fail: pysyncobj's behaviour (durable=False) loses acknowledged entries."""
    follower = Follower(tmp_path / "replica", durable=False)
    try:
        acknowledge_seven(follower, disk)
    finally:
        follower.node.destroy_synchronous()
    position, _last = disk.acks()[-1]
    log = restart_from(disk.durable_at(position), tmp_path / "after-power-cut", follower.peers)
    assert (7, 1) not in log


def test_a_leader_counts_its_own_entry_towards_a_commit_once_it_is_on_disk(
    disk: Disk, tmp_path: Path
) -> None:
    fast = Timing(election_min=0.4, election_max=0.5)
    node = RaftNode(f"127.0.0.1:{free_port()}", [], SECRET, tmp_path / "alone", fast)
    try:
        wait_for(node.is_leader, 5, "a one-replica leader")
        for i in range(5):
            node.propose({"op": "observe", "app": "a", "version": i})
    finally:
        node.destroy_synchronous()
    commits = [(i, e[1]) for i, e in enumerate(list(disk.events)) if e[0] == "commit"]
    assert commits, "the leader committed nothing"
    for position, index in commits:
        on_disk = [idx for idx, _term in entries_in(disk.durable_at(position), tmp_path)]
        assert index in on_disk, f"committed {index} while the disk held entries {on_disk}"


# -- (b) flush first, once per tick ---------------------------------------------------------------


def test_a_burst_of_appends_in_one_tick_is_flushed_once_before_any_answer(
    follower: Follower, disk: Disk
) -> None:
    wait_for(lambda: follower.node.gate.flushes >= 1, 5, "the new journal's first flush")
    flushes, start = follower.node.gate.flushes, len(disk.events)
    burst = [follower.append(1, (i - 1, 1 if i > 2 else 0), [(i, 1)], commit=1) for i in range(2, 22)]
    follower.deliver(*burst)
    wait_for(lambda: len(disk.acks()) == 20, 5, "20 answers")
    kinds = [e[0] for e in disk.events[start:] if e[0] != "commit"]
    assert kinds == ["flush"] + ["send"] * 20  # one flush for 20 entries, before every answer
    assert follower.node.gate.flushes == flushes + 1
    assert [last for _i, last in disk.acks()] == list(range(2, 22))


def test_a_vote_is_granted_only_after_the_journal_and_the_vote_are_on_disk(
    follower: Follower, disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync = os.fsync

    def recorded(fd: int) -> None:
        fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        vote = (
            _pickle.loads(Path(path).read_bytes())["votedForNodeId"] if path.endswith(".meta.tmp") else None
        )
        disk.events.append(("fsync", (path, vote)))

    monkeypatch.setattr(os, "fsync", recorded)
    wait_for(lambda: follower.node.gate.flushes >= 1, 5, "the new journal's first flush")
    start = len(disk.events)
    vote = {"type": "request_vote", "term": 2, "last_log_index": 3, "last_log_term": 1}
    follower.deliver(follower.append(1, (1, 0), [(2, 1), (3, 1)], commit=1), (follower.other, vote))
    wait_for(lambda: disk.sent("response_vote"), 5, "the vote")
    events = [e for e in disk.events[start:] if e[0] != "commit"]
    kinds = [e[1].get("type") if e[0] == "send" else e[0] for e in events]
    granted = kinds.index("response_vote")
    stored = [i for i, e in enumerate(events) if e[0] == "fsync" and e[1][1] == follower.other.id]
    folder = os.path.realpath(follower.data_dir)
    assert stored and stored[-1] < granted  # the vote itself is on disk ...
    assert ("fsync", (folder, None)) in events[stored[-1] : granted]  # ... under its name
    assert kinds.count("flush") == 1 and kinds.index("flush") < kinds.index("next_node_idx")
    assert kinds.index("flush") < granted  # and so is the log it judged the candidate's against
    assert kinds.index("next_node_idx") < granted  # held messages leave in order


def test_answers_with_nothing_new_to_write_are_not_held(follower: Follower, disk: Disk) -> None:
    follower.deliver(follower.append(1, (1, 0), [(2, 1)], commit=1))
    wait_for(lambda: len(disk.acks()) == 1, 5, "the first answer")
    flushes, start = follower.node.gate.flushes, len(disk.events)
    follower.deliver(follower.append(1, (2, 1), [], commit=2))  # a heartbeat
    wait_for(lambda: len(disk.acks()) == 2, 5, "the heartbeat's answer")
    assert follower.node.gate.flushes == flushes and "flush" not in [e[0] for e in disk.events[start:]]


# -- the full dump, after which log compaction or a snapshot from the leader cuts the journal ----


def test_the_full_dump_is_replaced_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (fsync(fd), synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    )
    (tmp_path / "raft.dump.tmp").write_bytes(b"snapshot")
    durable_replace(str(tmp_path / "raft.dump.tmp"), str(tmp_path / "raft.dump"))
    assert synced == [str(tmp_path / "raft.dump.tmp"), str(tmp_path)]
    assert (tmp_path / "raft.dump").read_bytes() == b"snapshot" and not (tmp_path / "raft.dump.tmp").exists()


def test_a_replica_writes_its_dump_and_a_leaders_snapshot_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After log compaction (serialize) and a snapshot from the leader (setTransmissionData)
    pysyncobj truncates the journal: the dump is on disk, under its name, before."""
    node = RaftNode(f"127.0.0.1:{free_port()}", [f"127.0.0.1:{free_port()}"], SECRET, tmp_path, QUIET)
    try:
        dumps = node._SyncObj__serializer
        assert isinstance(dumps, DurableSerializer)
        assert isinstance(node._SyncObj__raftLog, DurableJournal)
    finally:
        node.destroy_synchronous()
    synced: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (fsync(fd), synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    )
    dump = tmp_path / "raft.dump"
    dumps.serialize(({"machine": {}}, (NO_OP, 1, 0), (NO_OP, 2, 1), None), 2)
    assert synced == [f"{dump}.tmp", str(tmp_path)] and dump.exists()
    synced.clear()
    assert dumps.setTransmissionData((b"from the leader", True, True))
    assert synced == [f"{dump}.1.tmp", str(tmp_path)] and dump.read_bytes() == b"from the leader"


def test_a_replica_without_a_data_folder_holds_nothing_back() -> None:
    peers = [f"127.0.0.1:{free_port()}" for _i in range(2)]
    node = RaftNode(f"127.0.0.1:{free_port()}", peers, SECRET, None, QUIET)
    try:
        ack = {"type": "next_node_idx", "next_node_idx": 2, "reset": False, "success": True}
        assert not node.gate.hold(lambda _node, _message: None, None, ack)  # a memory journal
        node.gate.open()
        assert node.gate.flushes == 0
    finally:
        node.destroy_synchronous()


def test_a_failed_flush_stops_the_replica_and_sends_nothing_it_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Stopped(Exception):
        pass

    def exit_(code: int) -> None:
        raise Stopped(code)

    def lost(_file: Any) -> None:
        raise OSError(5, "Input/output error")

    journal = DurableJournal(str(tmp_path / "raft.journal"))
    gate = AckGate(lambda: journal)
    sent: list[Any] = []
    try:
        journal.add(NO_OP, 1, 0)
        ack = {"type": "next_node_idx", "next_node_idx": 2, "reset": False, "success": True}
        assert gate.hold(lambda _node, message: sent.append(message), None, ack)
        monkeypatch.setattr(ResizableFile, "flush", lost)
        monkeypatch.setattr(os, "_exit", exit_)
        with pytest.raises(Stopped) as stopped:
            gate.open()
        assert stopped.value.args == (os.EX_IOERR,) and sent == []
    finally:
        monkeypatch.undo()
        journal._destroy()


def _journal_with_five(path: Path) -> bytes:
    journal = DurableJournal(str(path))
    for idx in range(1, 6):
        journal.add(_pickle.dumps({"op": "noop", "n": idx}), idx, 1)
    journal.sync()
    journal._destroy()
    return path.read_bytes()


def _record(idx: int, term: int, command: bytes) -> bytes:
    body = struct.pack("<QQ", idx, term) + command
    return struct.pack("<I", len(body)) + body + struct.pack("<I", len(body))


def _with_tail(image: bytes, tail: bytes, claimed_extra: int) -> bytes:
    """The journal as a flush cut short leaves it: the header's end moved on by
    ``claimed_extra`` bytes, of which only ``tail`` reached the disk (zeros after it)."""
    end = struct.unpack_from("<I", image, LAST_RECORD_OFFSET_OFFSET)[0]
    data = bytearray(image.ljust(end + claimed_extra + 64, b"\0"))
    data[end : end + len(tail)] = tail
    struct.pack_into("<I", data, LAST_RECORD_OFFSET_OFFSET, end + claimed_extra)
    return bytes(data)


@pytest.mark.parametrize(
    "torn",
    [
        pytest.param(lambda: (b"", 40), id="header-on-disk-record-not"),
        pytest.param(lambda: (_record(6, 1, b"x" * 30)[:20], 46), id="record-half-written"),
        pytest.param(lambda: (_record(9, 1, b"y" * 8), 32), id="index-does-not-follow"),
        pytest.param(lambda: (_record(6, 1, b"z" * 8)[:-4] + b"\xff\0\0\0", 32), id="sizes-differ"),
    ],
)
def test_a_torn_tail_is_dropped_and_the_flushed_entries_load(tmp_path: Path, torn: Any) -> None:
    path = tmp_path / "journal"
    image = _journal_with_five(path)
    tail, extra = torn()
    path.write_bytes(_with_tail(image, tail, extra))
    journal = DurableJournal(str(path))
    try:
        assert [(idx, term) for _cmd, idx, term in (journal[i] for i in range(len(journal)))] == [
            (i, 1) for i in range(1, 6)
        ]
        assert _pickle.loads(journal[4][0]) == {"op": "noop", "n": 5}
        journal.add(_pickle.dumps({"op": "noop", "n": 6}), 6, 2)  # it goes on after the cut
        journal.sync()
    finally:
        journal._destroy()
    assert torn_tail(str(path)) is None
    again = DurableJournal(str(path))
    try:
        assert [again[i][1] for i in range(len(again))] == [1, 2, 3, 4, 5, 6]
    finally:
        again._destroy()


def test_pysyncobj_alone_cannot_start_from_a_torn_tail(tmp_path: Path) -> None:
    """The control: the same torn journal stops pysyncobj's own FileJournal at start."""
    path = tmp_path / "journal"
    path.write_bytes(_with_tail(_journal_with_five(path), b"", 40))
    with pytest.raises(struct.error):
        FileJournal(str(path))


def test_a_whole_journal_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    image = _journal_with_five(path)
    assert torn_tail(str(path)) is None
    DurableJournal(str(path))._destroy()
    assert path.read_bytes()[:FIRST_RECORD_OFFSET] == image[:FIRST_RECORD_OFFSET]
