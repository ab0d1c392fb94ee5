"""A follower (a real RaftNode) keeps the entries it holds when the leader repeats them (Raft 5.3).

pysyncobj 0.3.17 deleted everything after ``prevLogIdx`` whenever the follower's log was
longer, so a late or repeated append (routine when the leader sees replies late) deleted
applied entries and logged ``state machine may have diverged`` (issue 21).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from qonnect.controller.raft import RaftNode, Timing
from support import free_port

NO_OP = b"\x01"  # pysyncobj's no-op command: applying it touches no state machine


class Follower:
    """A replica whose peers never answer; messages from the 'leader' peer are delivered on
    the replica's own tick thread, and its replies are recorded."""

    def __init__(self) -> None:
        peers = [f"127.0.0.1:{free_port()}" for _i in range(2)]
        quiet = Timing(election_min=600, election_max=1200, leader_fallback=1300, connection_timeout=1300)
        self.node = RaftNode(f"127.0.0.1:{free_port()}", peers, "s3cr3t-" * 6, None, quiet)
        self.leader = sorted(self.node.otherNodes, key=lambda n: n.id)[0]
        self.replies: list[dict[str, Any]] = []
        transport = self.node._SyncObj__transport

        def record(node: Any, message: dict[str, Any]) -> bool:
            self.replies.append(message)
            return True

        transport.send = record
        self.inbox: queue.Queue[tuple[dict[str, Any], threading.Event]] = queue.Queue()
        self.node.addOnTickCallback(self._deliver)

    def _deliver(self) -> None:
        while not self.inbox.empty():
            message, done = self.inbox.get()
            self.node._SyncObj__onMessageReceived(self.leader, message)
            done.set()

    def append(
        self, term: int, prev: tuple[int, int], entries: list[tuple[int, int]], commit: int
    ) -> dict[str, Any]:
        message = {
            "type": "append_entries",
            "term": term,
            "commit_index": commit,
            "entries": [(NO_OP, idx, t) for idx, t in entries],
            "prevLogIdx": prev[0],
            "prevLogTerm": prev[1],
        }
        done = threading.Event()
        self.inbox.put((message, done))
        assert done.wait(5), "the tick thread did not deliver the message"
        return self.replies[-1]

    def log(self) -> list[tuple[int, int]]:
        return [(e[1], e[2]) for e in self.node._SyncObj__raftLog]

    def wait_applied(self, index: int) -> None:
        deadline = time.monotonic() + 5
        while self.node.raftLastApplied < index and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.node.raftLastApplied == index


@pytest.fixture()
def follower() -> Iterator[Follower]:
    f = Follower()
    try:
        yield f
    finally:
        f.node.destroy()


def _criticals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]


def test_a_repeated_append_keeps_applied_entries(
    follower: Follower, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    assert follower.log() == [(1, 0)]
    assert follower.append(1, (1, 0), [(2, 1), (3, 1), (4, 1), (5, 1)], commit=1)["next_node_idx"] == 6
    follower.append(1, (5, 1), [(6, 1), (7, 1)], commit=7)
    follower.wait_applied(7)
    held = follower.log()

    late = follower.append(1, (1, 0), [(2, 1), (3, 1), (4, 1), (5, 1)], commit=7)  # sent again, arrives late
    assert late["success"] and late["next_node_idx"] == 6  # acks what this message vouched for
    assert follower.append(1, (3, 1), [], commit=7)["success"]  # a heartbeat from an older next index
    assert follower.log() == held and follower.node.raftCommitIndex == 7
    assert not _criticals(caplog)


def test_a_conflicting_unapplied_suffix_is_replaced(
    follower: Follower, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    follower.append(1, (1, 0), [(2, 1), (3, 1), (4, 1), (5, 1)], commit=3)
    follower.wait_applied(3)
    reply = follower.append(2, (3, 1), [(4, 2)], commit=4)  # a new leader never had 4..5 of term 1
    assert reply["success"] and reply["next_node_idx"] == 5
    assert follower.log() == [(1, 0), (2, 1), (3, 1), (4, 2)]
    follower.wait_applied(4)
    assert not _criticals(caplog)


def test_commit_covers_only_entries_the_leader_vouched_for(follower: Follower) -> None:
    follower.append(1, (1, 0), [(2, 1), (3, 1), (4, 1), (5, 1)], commit=3)
    # a new leader whose log ends at 3 (and whose 4..5 differ) commits 5: entries 4..5 held
    # here from term 1 are not confirmed by a heartbeat at 3, so they are not committed
    follower.append(2, (3, 1), [], commit=5)
    assert follower.node.raftCommitIndex == 3
    follower.append(2, (3, 1), [(4, 2), (5, 2)], commit=5)
    assert follower.log()[-2:] == [(4, 2), (5, 2)] and follower.node.raftCommitIndex == 5


def test_a_mismatched_previous_entry_asks_the_leader_to_go_back(follower: Follower) -> None:
    follower.append(1, (1, 0), [(2, 1), (3, 1)], commit=1)
    reply = follower.append(2, (3, 2), [(4, 2)], commit=1)
    assert not reply["success"] and reply["reset"] and reply["next_node_idx"] == 3
    reply = follower.append(2, (9, 2), [(10, 2)], commit=1)
    assert not reply["success"] and reply["reset"] and reply["next_node_idx"] == 4
    assert follower.log() == [(1, 0), (2, 1), (3, 1)]
