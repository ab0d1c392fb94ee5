"""The replicated decision log: determinism, fencing, one migration per application."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qonnect.controller.statemachine import (
    FAILED,
    PENDING,
    RETRY,
    RUNNING,
    SUCCEEDED,
    CommandError,
    DecisionLog,
)


def decide(app="shop", term=1, exclude=("edge-1",), **kw):
    return {
        "op": "decide",
        "term": term,
        "node": "n1",
        "ts": 100.0,
        "app": app,
        "reason": "cluster edge-1 down",
        "exclude": list(exclude),
        "kind": "cluster-down",
        **kw,
    }


def start(did, term=1, node="n1"):
    return {"op": "start", "id": did, "term": term, "node": node, "ts": 101.0}


def finish(did, attempt, result=SUCCEEDED, term=1, **kw):
    return {
        "op": "finish",
        "id": did,
        "attempt": attempt,
        "result": result,
        "term": term,
        "node": "n1",
        "ts": 102.0,
        **kw,
    }


def test_decision_gets_token_and_blocks_second_decision_for_same_app():
    log = DecisionLog()
    first = log.apply(decide())
    assert first["ok"] and first["token"] == {"term": 1, "seq": 1}
    second = log.apply(decide())
    assert not second["ok"] and "in flight" in second["why"] and second["id"] == first["id"]
    other = log.apply(decide(app="blog"))
    assert other["ok"] and other["token"]["seq"] == 2
    assert set(log.inflight) == {"shop", "blog"}


def test_attempt_lifecycle_and_tokens_strictly_increase():
    log = DecisionLog()
    did = log.apply(decide())["id"]
    s1 = log.apply(start(did))
    assert s1["ok"] and s1["attempt"] == 1 and s1["token"] == {"term": 1, "seq": 2}
    assert log.get(did)["status"] == RUNNING
    assert not log.apply(start(did))["ok"], "a second start in the same term must be refused"
    r = log.apply(finish(did, 1, FAILED, retry=True, not_before=110.0))
    assert r["status"] == RETRY and log.get(did)["not_before"] == 110.0
    s2 = log.apply(start(did))
    assert s2["attempt"] == 2 and (s2["token"]["term"], s2["token"]["seq"]) > (1, 2)
    assert not log.apply(finish(did, 1))["ok"], "an old attempt cannot finish the decision"
    assert log.apply(finish(did, 2))["status"] == SUCCEEDED
    assert "shop" not in log.inflight and log.counters[SUCCEEDED] == 1


def test_new_leader_takes_over_running_attempt_with_newer_token():
    log = DecisionLog()
    did = log.apply(decide())["id"]
    old = log.apply(start(did, term=1, node="old"))["token"]
    new = log.apply(start(did, term=2, node="new"))
    assert (
        new["ok"]
        and new["attempt"] == 2
        and (new["token"]["term"], new["token"]["seq"]) > (old["term"], old["seq"])
    )
    assert not log.apply(finish(did, 1, term=2))["ok"], "the deposed leader's attempt is not the running one"


def test_takeover_compares_raft_terms_even_when_tokens_are_offset():
    log = DecisionLog()
    log.apply({"op": "leader", "term": 1, "node": "old", "ts": 1.0, "kb_floor": 5})
    did = log.apply(decide(term=1))["id"]
    assert log.apply(start(did, term=1, node="old"))["token"]["term"] == 6
    log.apply({"op": "leader", "term": 2, "node": "new", "ts": 2.0})
    res = log.apply(start(did, term=2, node="new"))
    assert res["ok"] and res["token"] == {"term": 7, "seq": 5}  # each leader entry issues a token too


def test_leader_entry_issues_the_token_the_new_leader_fences_with():
    log = DecisionLog()
    old = log.apply({"op": "leader", "term": 1, "node": "old", "ts": 1.0})["token"]
    did = log.apply(decide(term=1))["id"]
    attempt = log.apply(start(did, term=1, node="old"))["token"]
    new = log.apply({"op": "leader", "term": 2, "node": "new", "ts": 2.0})["token"]
    assert (old["term"], old["seq"]) < (attempt["term"], attempt["seq"]) < (new["term"], new["seq"])


def test_defer_keeps_the_decision_open_without_using_an_attempt_and_retarget_updates_exclusions():
    log = DecisionLog()
    did = log.apply(decide())["id"]
    res = log.apply(
        {
            "op": "defer",
            "id": did,
            "term": 1,
            "node": "n1",
            "detail": "ratings: no eligible cluster",
            "not_before": 50.0,
        }
    )
    assert res["ok"] and res["deferrals"] == 1
    decision = log.get(did)
    assert decision["status"] == "retry" and decision["attempts"] == 0 and decision["not_before"] == 50.0
    assert "no eligible" in decision["detail"] and "shop" in log.inflight
    assert log.apply({"op": "retarget", "id": did, "term": 1, "node": "n1", "exclude": ["b", "a"]})[
        "exclude"
    ] == ["a", "b"]
    log.apply(start(did))
    assert not log.apply(
        {"op": "defer", "id": did, "term": 1, "node": "n1", "detail": "x", "not_before": 1.0}
    )["ok"]


def test_stale_term_is_refused_and_counted():
    log = DecisionLog()
    log.apply({"op": "leader", "term": 3, "node": "n2", "ts": 1.0})
    r = log.apply(decide(term=2))
    assert not r["ok"] and "stale term" in r["why"]
    assert log.counters["refused"] == 1 and not log.inflight


def test_failed_for_good_releases_app_and_cancel_works():
    log = DecisionLog()
    did = log.apply(decide())["id"]
    log.apply(start(did))
    assert log.apply(finish(did, 1, FAILED, retry=False))["status"] == FAILED
    assert "shop" not in log.inflight
    did2 = log.apply(decide())["id"]
    assert (
        log.apply({"op": "cancel", "id": did2, "term": 1, "node": "n1", "ts": 5.0})["status"] == "cancelled"
    )
    assert not log.apply({"op": "cancel", "id": did2, "term": 1, "node": "n1"})["ok"]


def test_kb_floor_lifts_token_terms_above_what_the_kb_holds():
    log = DecisionLog()  # as if every replica lost its log: Raft term restarts at 1
    res = log.apply({"op": "leader", "term": 1, "node": "n1", "ts": 1.0, "kb_floor": 7})
    assert res["token_term"] == 8
    assert log.apply(decide())["token"]["term"] == 8


def test_spec_version_recorded_on_success_and_observe():
    log = DecisionLog()
    log.apply({"op": "observe", "app": "shop", "version": 1, "term": 1, "node": "n1"})
    did = log.apply(decide(spec_version=2))["id"]
    log.apply(start(did))
    log.apply(finish(did, 1))
    assert log.versions == {"shop": 2}
    log.apply({"op": "observe", "app": "shop", "version": None, "term": 1, "node": "n1"})
    assert log.versions == {}


@pytest.mark.parametrize(
    "cmd, field",
    [
        ({"op": "decide", "term": 1, "app": 3, "exclude": [], "reason": "x"}, "app"),
        ({"op": "decide", "term": "1", "app": "a", "exclude": [], "reason": "x"}, "term"),
        ({"op": "start", "term": 1, "node": "n"}, "id"),
        ({"op": "bogus", "term": 1}, "op"),
        ({"op": "decide", "term": True, "app": "a", "exclude": [], "reason": "x"}, "term"),
    ],
)
def test_malformed_commands_name_the_field(cmd, field):
    with pytest.raises(CommandError, match=f"'{field}'"):
        DecisionLog().apply(cmd)


def test_snapshot_roundtrip_is_plain_data():
    log = DecisionLog()
    did = log.apply(decide())["id"]
    log.apply(start(did))
    data = log.to_dict()
    clone = DecisionLog.from_dict(copy.deepcopy(data))
    assert clone.to_dict() == data
    assert clone.apply(finish(did, 1))["ok"]


ops = st.one_of(
    st.builds(lambda app, t: decide(app=app, term=t), st.sampled_from(["a", "b", "c"]), st.integers(1, 4)),
    st.builds(lambda n, t: start(f"d{t}.{n}", term=t), st.integers(1, 12), st.integers(1, 4)),
    st.builds(
        lambda n, t, a, r, retry: finish(f"d{t}.{n}", a, r, term=t, retry=retry),
        st.integers(1, 12),
        st.integers(1, 4),
        st.integers(1, 3),
        st.sampled_from([SUCCEEDED, FAILED]),
        st.booleans(),
    ),
    st.builds(
        lambda t, f: {"op": "leader", "term": t, "node": "x", "ts": 1.0, "kb_floor": f},
        st.integers(1, 4),
        st.integers(0, 6),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(ops, max_size=40))
def test_any_command_sequence_is_deterministic_and_keeps_invariants(commands):
    a, b = DecisionLog(), DecisionLog()
    tokens = []
    for cmd in commands:
        ra, rb = a.apply(dict(cmd)), b.apply(dict(cmd))
        assert ra == rb
        if ra.get("ok") and "token" in ra:
            tokens.append((ra["token"]["term"], ra["token"]["seq"]))
    assert a.to_dict() == b.to_dict()
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "tokens strictly increase"
    open_by_app: dict[str, int] = {}
    for d in a.open_decisions():
        open_by_app[d["app"]] = open_by_app.get(d["app"], 0) + 1
        assert d["status"] in (PENDING, RUNNING, RETRY)
    assert all(n == 1 for n in open_by_app.values()), "at most one open decision per application"
    assert dict(a.inflight) == {d["app"]: d["id"] for d in a.open_decisions()}


def test_a_wiped_log_knows_no_decision_even_after_a_leader_entry():
    """The KB's record of a decision newer than the log is re-decided; the new leader's own
    entry issues a token but must not hide such a decision."""
    log = DecisionLog()
    log.apply({"op": "leader", "term": 1, "node": "n1", "ts": 1.0, "kb_floor": 5})
    assert log.newest_decision_token() == (0, 0) and log.last_token["term"] == 6
    did = log.apply(decide())["id"]
    token = log.apply(start(did))["token"]
    assert log.newest_decision_token() == (token["term"], token["seq"])


def test_decide_many_commits_a_pass_in_one_entry_like_separate_decides():
    """Issue 21: 50 applications on a failed cluster were 50 commits ~0.1 s apart (5 s before
    the last migration could start); one entry now carries the whole pass, with the same
    decisions, tokens and refusals as separate ``decide`` entries."""
    items = [{k: v for k, v in decide(app=a).items() if k not in ("op", "term")} for a in ("a", "b", "a")]
    one, many = DecisionLog(), DecisionLog()
    separate = [one.apply(decide(app=i["app"])) for i in items]
    batch = many.apply({"op": "decide_many", "term": 1, "node": "n1", "ts": 100.0, "decisions": items})
    assert batch["ok"] and batch["results"] == separate
    assert [r["ok"] for r in batch["results"]] == [True, True, False]  # a second one for "a" waits
    assert many.to_dict() == one.to_dict()


def test_a_malformed_decision_anywhere_in_a_batch_changes_nothing():
    log = DecisionLog()
    good = {k: v for k, v in decide().items() if k not in ("op", "term")}
    before = log.to_dict()
    with pytest.raises(CommandError, match=r"decisions\[1\]: field 'reason'"):
        log.apply({"op": "decide_many", "term": 1, "decisions": [good, dict(good, reason=None)]})
    assert {k: v for k, v in log.to_dict().items() if k != "term"} == {
        k: v for k, v in before.items() if k != "term"
    }


def test_observe_many_records_and_forgets_versions_in_one_entry():
    log = DecisionLog()
    assert log.apply({"op": "observe_many", "term": 1, "versions": [["a", 1], ["b", 2]]})["ok"]
    assert log.apply({"op": "observe_many", "term": 1, "versions": [["a", None], ["c", 3]]})["ok"]
    assert log.versions == {"b": 2, "c": 3}
    with pytest.raises(CommandError, match=r"'versions\[0\]'"):
        log.apply({"op": "observe_many", "term": 1, "versions": [["d", True]]})
    assert log.versions == {"b": 2, "c": 3}


def test_many_starts_and_finishes_a_batch_in_one_entry_like_separate_commands():
    """Issue 21: a batch of 50 migrations committed 50 'start' entries ~0.1 s apart (5.1 s between
    the batch plan and the playbook's start) and 50 'finish' entries after it; one 'many' entry
    now carries each, with the same attempts, tokens, plans and refusals as separate commands."""
    one, many = DecisionLog(), DecisionLog()
    ids = [one.apply(decide(app=a))["id"] for a in ("a", "b")]
    assert [many.apply(decide(app=a))["id"] for a in ("a", "b")] == ids
    plan = {"web": [{"cluster": "fog-1", "replicas": 1}]}
    starts = [dict(start(ids[0]), plan=plan), start(ids[1]), start("d9.9")]
    separate = [one.apply(c) for c in starts]
    batch = many.apply(
        {"op": "many", "term": 1, "node": "n1", "ts": 101.0, "commands": [strip(c) for c in starts]}
    )
    assert batch["ok"] and batch["results"] == separate
    assert [r["ok"] for r in batch["results"]] == [True, True, False]  # an unknown decision is refused
    assert many.get(ids[0])["plan"] == plan
    ends = [finish(ids[0], 1), finish(ids[1], 1, result=FAILED, retry=True, not_before=200.0)]
    separate = [one.apply(c) for c in ends]
    batch = many.apply(
        {"op": "many", "term": 1, "node": "n1", "ts": 102.0, "commands": [strip(c) for c in ends]}
    )
    assert batch["results"] == separate
    assert [many.get(i)["status"] for i in ids] == [SUCCEEDED, RETRY]
    assert many.to_dict() == one.to_dict()


def strip(cmd):
    """A command as an item of 'many' (the entry carries the term, node and time)."""
    return {k: v for k, v in cmd.items() if k not in ("term", "node", "ts")}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"op": "start"}, r"commands\[1\]: field 'id'"),
        (
            {"op": "finish", "id": "d1.1", "attempt": True, "result": SUCCEEDED},
            r"commands\[1\]: field 'attempt'",
        ),
        ({"op": "finish", "id": "d1.1", "attempt": 1, "result": "maybe"}, r"commands\[1\]: field 'result'"),
        ({"op": "start", "id": "d1.1", "plan": {"web": "fog-1"}}, r"commands\[1\]: field 'plan'"),
        ({"op": "decide", "app": "x"}, r"commands\[1\]\.op"),
        ("start", r"'commands\[1\]' must be a dict"),
    ],
)
def test_a_malformed_command_anywhere_in_many_changes_nothing(bad, field):
    log = DecisionLog()
    did = log.apply(decide())["id"]
    before = log.to_dict()
    with pytest.raises(CommandError, match=field):
        log.apply({"op": "many", "term": 1, "node": "n1", "commands": [strip(start(did)), bad]})
    assert log.to_dict() == before
