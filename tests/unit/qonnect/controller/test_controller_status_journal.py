"""Event references, Prometheus text, status rendering, secret and address checks."""

from __future__ import annotations

import secrets

import pytest
from qonnect.controller import journal
from qonnect.controller.raft_config import RaftConfigError, check_address, read_secret
from qonnect.controller.status import Metrics, render

DECISION = {
    "id": "d4.17",
    "app": "shop",
    "kind": "cluster-down",
    "exclude": ["edge-1", "fog-2"],
    "token": {"term": 4, "seq": 17},
}


def test_references_are_structured_fields_with_the_fencing_token():
    kb = FakeKB()
    journal.post(kb, journal.DECISION, DECISION, "decided to re-place shop", fence={"term": 4, "seq": 16})
    journal.post(kb, journal.SUCCEEDED, DECISION, "attempt 2 succeeded", 2, {"term": 5, "seq": 20})
    first, second = kb.events
    assert first["ref"] == {
        "id": "d4.17",
        "term": 4,
        "seq": 17,
        "attempt": None,
        "exclude": ["edge-1", "fog-2"],
    }
    assert first["fencing"] == {"term": 4, "seq": 16}
    assert "edge-1" in first["message"] and "fog-2" in first["message"], "both failed clusters are named"
    assert second["ref"] == {"id": "d4.17", "term": 5, "seq": 20, "attempt": 2, "exclude": []}
    assert second["fencing"] == {"term": 5, "seq": 20}
    assert "[decision" not in first["message"], "no machine-readable prose to parse"


class FakeKB:
    """Records posted events as the KB would list them (a stand-in for the HTTP client, not for a
    qonnect component): the role is the token's, as the KB records it."""

    def __init__(self, role="controller"):
        self.events = []
        self.role = role

    def post_event(self, event):
        self.events.append(dict(event, id=len(self.events) + 1, role=self.role))
        return self.events[-1]

    def list_events(self, application=None, limit=100):
        return [e for e in self.events if e.get("application") == application]


def test_unfinished_decisions_newer_than_the_log_are_found_once_per_app():
    kb = FakeKB()
    journal.post(kb, journal.DECISION, DECISION, "decided")
    older = dict(DECISION, id="d4.3", token={"term": 4, "seq": 3})
    journal.post(kb, journal.DECISION, older, "decided")
    journal.post(kb, journal.SUCCEEDED, older, "done", 1, {"term": 4, "seq": 4})
    found = journal.unfinished_in_kb(kb, (0, 0), ["shop"])
    assert [e["ref"]["id"] for e in found] == ["d4.17"]
    assert journal.unfinished_in_kb(kb, (4, 17), ["shop"]) == [], "the log already knows it"
    journal.post(kb, journal.SUPERSEDED, DECISION, "carried on")
    assert journal.unfinished_in_kb(kb, (0, 0), ["shop"]) == []
    assert kb.events[0]["cluster"] is None and kb.events[0]["reason"] == "cluster-down"


def test_events_not_written_under_a_controller_token_are_not_trusted():
    kb = FakeKB(role="agent")  # an agent's forged decision, shaped exactly like ours
    journal.post(kb, journal.DECISION, DECISION, "decided")
    assert journal.decision_story(kb, "shop") == [] and journal.unfinished_in_kb(kb, (0, 0), ["shop"]) == []


def status_doc(**kw):
    doc = {
        "node": "10.0.0.1:9000",
        "state": "leader",
        "is_leader": True,
        "leader": "10.0.0.1:9000",
        "term": 7,
        "commit_index": 42,
        "last_applied": 42,
        "has_quorum": True,
        "peers": {"10.0.0.2:9000": True, "10.0.0.3:9000": False},
        "kb": "ok",
        "why": "leader of term 7: watching",
        "token": {"term": 7, "seq": 3},
        "inflight": [],
        "recent": [],
        "log_counters": {"decisions": 3, "succeeded": 2},
        "running_here": [],
    }
    doc.update(kw)
    return doc


def test_metrics_text():
    m = Metrics()
    m.count_decision("cluster-down")
    m.count_migration("succeeded")
    m.count_migration("succeeded")
    m.observe("recovery_seconds", 9.5)
    text = m.render(status_doc())
    assert "qonnect_controller_is_leader 1\n" in text and "qonnect_controller_term 7\n" in text
    assert 'qonnect_controller_migrations_total{result="succeeded"} 2' in text
    assert 'qonnect_controller_decisions_total{kind="cluster-down"} 1' in text
    assert (
        "qonnect_controller_recovery_seconds_count 1\nqonnect_controller_recovery_seconds_sum 9.500" in text
    )
    assert 'qonnect_controller_log_decisions_total{outcome="decisions"} 3' in text
    assert "qonnect_controller_drift_judgements_total 0\n" in text
    assert "qonnect_controller_drift_judgements_total 1200\n" in m.render(status_doc(drift_judgements=1200))


def test_render_shows_leader_peers_inflight_and_unreachable():
    inflight = [
        {
            "id": "d7.2",
            "app": "shop",
            "status": "running",
            "attempts": 1,
            "owner": "10.0.0.1:9000",
            "reason": "cluster edge-1 down",
        }
    ]
    text = render({"http://a": status_doc(inflight=inflight), "http://b": "connection refused"})
    assert "LEADER  term 7  commit index 42" in text
    assert "10.0.0.3:9000 UNREACHABLE" in text and "10.0.0.2:9000 reachable" in text
    assert "d7.2 shop running attempt 1" in text and "http://b: UNREACHABLE (connection refused)" in text


def test_secret_file_checks(tmp_path):
    good = tmp_path / "s"
    value = secrets.token_hex(32)
    good.write_text(value + "\n")
    good.chmod(0o600)
    assert read_secret(str(good)) == value
    for weak, why in (
        ("x" * 20, "at least 32 bytes"),
        ("a" * 16, "at least 32 bytes"),
        ("ab" * 20, "not random"),
    ):
        bad = tmp_path / "weak"
        bad.write_text(weak)
        bad.chmod(0o600)
        with pytest.raises(RaftConfigError, match=why):
            read_secret(str(bad))
    good.chmod(0o640)
    with pytest.raises(RaftConfigError, match="permissions"):
        read_secret(str(good))
    with pytest.raises(RaftConfigError, match="cannot read"):
        read_secret(str(tmp_path / "missing"))


@pytest.mark.parametrize("value", ["nohost", ":80", "h:0", "h:70000", "h:x"])
def test_bad_addresses_are_refused(value):
    with pytest.raises(RaftConfigError, match="HOST:PORT"):
        check_address(value, "--self")
