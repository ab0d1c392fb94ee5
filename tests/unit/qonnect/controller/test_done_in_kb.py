"""A new leader takes an attempt of the old one as finished only from its finished write: the
intent written before any cluster was touched (``desired`` only) and the retraction of a failed
attempt carry the same fencing token, and were once taken for success (the new leader then
decided the same move again, seen by test_isolated_leader_does_not_complete_the_migration)."""

from __future__ import annotations

from qonnect.controller.journal import placed

OLD = {"ratings": [{"cluster": "edge-1", "replicas": 1}]}
NEW = {"ratings": [{"cluster": "edge-2", "replicas": 1}]}


def test_the_intent_alone_is_not_a_finished_move():
    assert not placed({"desired": NEW, "current": OLD}, {"exclude": ["edge-1"]})


def test_a_retracted_attempt_is_not_a_finished_move():
    assert not placed({"desired": OLD, "current": OLD}, {"exclude": ["edge-1"]})
    assert not placed({"desired": OLD, "current": OLD}, {"exclude": ["edge-1"], "plan": NEW})


def test_the_finished_write_is_a_finished_move():
    assert placed({"desired": NEW, "current": NEW}, {"exclude": ["edge-1"]})
    assert placed({"desired": NEW, "current": NEW}, {"exclude": ["edge-1"], "plan": NEW})
    hedged = {"ratings": [{"cluster": "edge-1"}, {"cluster": "edge-2", "role": "standby"}]}
    assert placed({"desired": hedged, "current": hedged}, {"exclude": ["edge-1"], "plan": hedged})
