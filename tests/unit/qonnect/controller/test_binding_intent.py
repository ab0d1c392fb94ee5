"""A controller's run writes its Binding as the application's desired placement before it touches
a cluster (runners/deploy.write_intent); when the decision ends without success and its run was
killed before it could retract that intent, the leader retracts it (moves.retract_intent), and
only that intent: never a user's deploy's (issue 38). On the contract-tested in-memory KB."""

from __future__ import annotations

from qonnect.controller import moves
from support.memory_kb import MemoryKB

OLD = {"web": [{"cluster": "edge-1", "replicas": 1}]}
NEW = {"web": [{"cluster": "edge-2", "replicas": 1}]}
USERS = {"web": [{"cluster": "edge-3", "replicas": 2}]}
T1, T2 = {"term": 3, "seq": 1}, {"term": 3, "seq": 2}


def placed() -> MemoryKB:
    kb = MemoryKB()
    kb.raise_fence(T1)
    kb.put_placement("shop", {"desired": OLD, "current": OLD}, T1)
    return kb


def decision(plan: bool = True, token: bool = True) -> dict:
    """The ended decision whose attempt (token T2) committed the plan NEW."""
    return {"id": "d-1", "app": "shop", "plan": NEW if plan else None, "attempt_token": T2 if token else None}


def test_a_killed_runs_intent_is_retracted_when_its_decision_ends():
    kb = placed()
    kb.put_placement("shop", {"desired": NEW}, T2)  # the run's intent; then it was killed
    assert moves.retract_intent(kb, decision())
    record = kb.get_placement("shop")
    assert (record["desired"], record["current"]) == (OLD, OLD)
    assert record["fencing"] == {"term": 3, "seq": 2}
    assert not moves.retract_intent(kb, decision())  # nothing left to retract


def test_a_users_deploy_in_progress_and_a_completed_run_are_left_alone():
    kb = placed()
    kb.put_placement("shop", {"desired": USERS})  # a user's deploy, unfenced, in progress
    writes = kb.writes
    assert not moves.retract_intent(kb, decision())
    assert kb.get_placement("shop")["desired"] == USERS and kb.writes == writes

    kb = placed()
    kb.put_placement("shop", {"desired": NEW}, T2)
    kb.put_placement("shop", {"desired": NEW, "current": NEW}, T2)  # the run completed it
    writes = kb.writes
    assert not moves.retract_intent(kb, decision())
    assert kb.get_placement("shop")["current"] == NEW and kb.writes == writes


def test_without_a_committed_plan_or_attempt_nothing_is_retracted():
    kb = placed()
    kb.put_placement("shop", {"desired": NEW}, T2)
    assert not moves.retract_intent(kb, decision(plan=False))
    assert not moves.retract_intent(kb, decision(token=False))
    assert kb.get_placement("shop")["desired"] == NEW


def test_an_older_token_cannot_retract_a_newer_runs_intent():
    kb = placed()
    kb.raise_fence({"term": 4, "seq": 0})
    kb.put_placement("shop", {"desired": NEW}, {"term": 4, "seq": 1})  # a newer leader's run
    assert not moves.retract_intent(kb, decision())  # the deposed attempt's token: refused
    assert kb.get_placement("shop")["desired"] == NEW


HEDGED = {
    "web": [{"cluster": "edge-1", "replicas": 1}, {"cluster": "edge-2", "replicas": 1, "role": "standby"}]
}


def test_a_withdrawn_hedges_intent_becomes_the_current_placement_for_its_discard():
    """A hedge withdrawn mid-run (its cluster came back): its Binding, standby included, is what
    the clusters may hold now, so it becomes current (the discard converges from it); then there
    is nothing left to retract, and a user's deploy's intent is never adopted."""
    kb = placed()
    kb.put_placement("shop", {"desired": HEDGED}, T2)  # the hedge's intent; its run was stopped
    hedge = dict(decision(), plan=HEDGED)
    assert moves.adopt_intent(kb, hedge)
    record = kb.get_placement("shop")
    assert (record["desired"], record["current"]) == (HEDGED, HEDGED)
    assert record["fencing"] == {"term": 3, "seq": 2}
    assert not moves.adopt_intent(kb, hedge) and not moves.retract_intent(kb, hedge)

    kb = placed()
    kb.put_placement("shop", {"desired": USERS})  # a user's deploy, unfenced, in progress
    writes = kb.writes
    assert not moves.adopt_intent(kb, hedge)
    assert kb.get_placement("shop")["current"] == OLD and kb.writes == writes
