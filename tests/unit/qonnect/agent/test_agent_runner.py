"""The agent loop's decisions: unreachable clusters, KB outages, refused reports, stopping."""

from __future__ import annotations

import threading

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from qonnect.agent.buffer import Outbox
from qonnect.agent.collector import CollectError
from qonnect.agent.runner import Agent
from qonnect.agent.sequence import Sequence


class RecordingKB:
    """Stands in for the KB's HTTP API: records reports, or fails with a given status."""

    def __init__(self):
        self.received: list[dict] = []
        self.fail_status: int | None = None

    def report(self, cluster, report):
        assert cluster == "edge-1"
        if self.fail_status is not None:
            raise KBError(self.fail_status, "nope")
        self.received.append(report)
        return {}


def make_agent(collect, kb, capacity=10):
    return Agent("edge-1", collect, kb, Outbox(capacity), Sequence(), interval=0.01)


def observed():
    return {"nodes": [{"name": "n1"}], "workloads": []}


def test_report_carries_observation_seq_and_reachability():
    kb = RecordingKB()
    agent = make_agent(observed, kb)
    agent.tick()
    agent.tick()
    first, second = kb.received
    assert first["reachable"] is True and first["error"] is None
    assert first["nodes"] == [{"name": "n1"}] and first["workloads"] == []
    assert second["seq"] > first["seq"] and second["ts"] >= first["ts"]
    assert first["latencies"] == {}


def test_unreachable_cluster_is_reported_with_the_error_and_no_observation():
    def down():
        raise CollectError("GET /api/v1/nodes: ConnectionRefusedError")

    kb = RecordingKB()
    make_agent(down, kb).tick()
    (report,) = kb.received
    assert report["reachable"] is False
    assert report["error"] == "GET /api/v1/nodes: ConnectionRefusedError"
    assert report["nodes"] is None and report["workloads"] is None


def test_kb_outage_buffers_then_delivers_in_order():
    kb = RecordingKB()
    agent = make_agent(observed, kb, capacity=3)
    kb.fail_status = 0
    for _tick in range(5):
        agent.tick()
    assert kb.received == [] and len(agent.outbox) == 3
    kb.fail_status = None
    agent.tick()  # the sixth report compacts the oldest again, then all three go out
    seqs = [r["seq"] for r in kb.received]
    assert len(seqs) == 3 and seqs == sorted(seqs)
    assert seqs[-1] == agent.sequence.last
    assert len(agent.outbox) == 0


def test_only_undelivered_reports_are_written_to_the_outbox_file(tmp_path):
    path = tmp_path / "outbox.json"
    kb = RecordingKB()
    agent = Agent("edge-1", observed, kb, Outbox(10, path), Sequence(), interval=0.01)
    agent.tick()
    agent.tick()
    assert len(kb.received) == 2 and not path.exists()  # delivered at once: no disk write
    kb.fail_status = 0
    agent.tick()
    assert [r["seq"] for r in Outbox(10, path)] == [agent.sequence.last]  # a restart keeps it
    kb.fail_status = None
    agent.tick()
    assert len(kb.received) == 4 and len(Outbox(10, path)) == 0


def test_server_errors_and_auth_errors_keep_the_report_for_later():
    kb = RecordingKB()
    agent = make_agent(observed, kb)
    for status in (503, 401, 404):
        kb.fail_status = status
        agent.tick()
    assert len(agent.outbox) == 3


def test_a_report_the_kb_rejects_for_good_is_dropped_not_retried_forever():
    kb = RecordingKB()
    agent = make_agent(observed, kb)
    kb.fail_status = 422
    agent.tick()
    assert len(agent.outbox) == 0 and kb.received == []


def test_a_bug_in_one_tick_does_not_end_the_loop_and_stop_ends_it():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("bug")
        if len(calls) >= 3:
            agent.stop()
        return observed()

    kb = RecordingKB()
    agent = make_agent(flaky, kb)
    thread = threading.Thread(target=agent.run)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
    # tick 1 failed, tick 2 delivered, tick 3 was stopped before delivery: its report stays queued
    assert len(calls) == 3 and len(kb.received) == 1 and len(agent.outbox) == 1
