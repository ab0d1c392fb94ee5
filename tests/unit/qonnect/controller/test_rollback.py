"""Which version a failing one rolls back to (controller/rollback.py, issue 22.4)."""

from __future__ import annotations

from qonnect.controller.rollback import restore_target


def version(n: int, image: str, rollback: dict | None = None) -> dict:
    record = {"version": n, "created": float(n), "spec": {}, "application": {"image": image}}
    if rollback:
        record["rollback"] = rollback
    return record


def test_the_newest_older_version_is_restored():
    history = [version(1, "a"), version(2, "b"), version(3, "crash")]
    assert restore_target(history, 3)[0] == 2


def test_a_version_with_the_failing_spec_is_skipped():
    # 2 and 4 hold the same spec (a user redeployed it): restoring 2 would restore the failure
    history = [version(1, "a"), version(2, "crash"), version(3, "b"), version(4, "crash")]
    assert restore_target(history, 4)[0] == 3
    assert restore_target([version(1, "a"), version(2, "crash"), version(3, "crash")], 3)[0] == 1


def test_a_version_a_rollback_replaced_is_never_restored():
    history = [
        version(1, "a"),
        version(2, "crash"),
        version(3, "a", {"failing": 2, "restores": 1}),
        version(4, "crash-again"),
    ]
    target, why = restore_target(history, 4)
    assert target == 3 and "did not fail" in why  # 3 ran version 1's spec, 2 failed
    history.append(version(5, "worse"))
    assert restore_target(history, 5)[0] == 4


def test_a_rollback_is_not_rolled_back_again():
    history = [version(1, "a"), version(2, "crash"), version(3, "a", {"failing": 2, "restores": 1})]
    target, why = restore_target(history, 3)
    assert target is None and "itself stored by a rollback" in why and "version 2" in why


def test_nothing_to_restore_says_why():
    assert restore_target([version(1, "crash")], 1) == (
        None,
        "no version before 1 that did not fail to roll back to",
    )
    target, why = restore_target([version(1, "a")], 7)
    assert target is None and "version 7 is not in the KB's history" in why
    assert restore_target([version(1, "a")], None)[0] is None
