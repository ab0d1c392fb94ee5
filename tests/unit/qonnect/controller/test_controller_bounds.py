"""A takeover never exceeds --max-attempts (issue 21): each new leader's 'start' of a running
attempt used to add one attempt unchecked, so leader churn took a migration to 11 attempts."""

from __future__ import annotations

from qonnect.controller.statemachine import FAILED, RUNNING, DecisionLog


def _cmd(op: str, term: int, **kw: object) -> dict[str, object]:
    return {"op": op, "term": term, "node": f"n{term}", "ts": float(term), **kw}


def test_takeovers_stop_at_max_attempts() -> None:
    log = DecisionLog()
    did = log.apply(_cmd("decide", 1, app="shop", exclude=["edge-1"], reason="cluster-down"))["id"]
    seen = []
    for term in range(1, 10):  # a new leader per term takes over the running attempt
        res = log.apply(_cmd("start", term, id=did, max_attempts=4))
        seen.append(log.get(did)["attempts"])
        if not res["ok"]:
            break
        assert log.get(did)["status"] == RUNNING
    assert max(seen) == 4
    assert log.get(did)["status"] == FAILED
    assert "shop" not in log.inflight
    assert log.apply(_cmd("start", 11, id=did, max_attempts=4))["ok"] is False


def test_start_without_limit_keeps_old_commands_replayable() -> None:
    log = DecisionLog()
    did = log.apply(_cmd("decide", 1, app="shop", exclude=[], reason="r"))["id"]
    for term in range(1, 7):
        assert log.apply(_cmd("start", term, id=did))["ok"]
    assert log.get(did)["attempts"] == 6
