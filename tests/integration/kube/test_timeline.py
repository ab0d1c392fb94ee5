"""The simulated kubelet's container histories (pure: no cluster needed)."""

from __future__ import annotations

import pytest
from qonnect_testbed.kube import timeline
from qonnect_testbed.kube.policy import ProfilePolicy


def stamp(t: float) -> str:
    return f"t+{t:g}"


def at(kind, seconds, elapsed, delay=1.0):
    return timeline.view(kind, seconds, delay, elapsed, "img", stamp)


def test_normal_container_is_created_then_running_and_ready_after_the_delay():
    before = at(None, 0, 0.5)
    assert before.state == {"waiting": {"reason": "ContainerCreating"}} and not before.ready
    assert before.next_change == 1.0
    after = at(None, 0, 1.0)
    assert after.state == {"running": {"startedAt": "t+1"}} and after.ready and after.started
    assert after.next_change == float("inf")


def test_a_slow_pull_is_part_of_the_start_delay():
    policy = ProfilePolicy({}, 1.0)
    assert policy.fault("qonnect.test/slow-5s/web:1") == (None, 0.0)
    assert policy.delay("qonnect.test/slow-5s/web:1") == 6.0
    assert policy.fault("qonnect.test/pull-flaky-20s/web") == ("pull-flaky", 20.0)


def test_pull_failure_alternates_err_image_pull_and_back_off_forever():
    assert at("pull-fail", 0, 1.5).state["waiting"]["reason"] == "ErrImagePull"
    back = at("pull-fail", 0, 2.5)
    assert back.state["waiting"]["reason"] == "ImagePullBackOff" and back.restart_count == 0
    assert back.next_change == 12.0  # 1 s ErrImagePull, then 10 s back-off
    assert at("pull-fail", 0, 12.5).state["waiting"]["reason"] == "ErrImagePull"
    assert at("pull-fail", 0, 23.0).next_change == 33.0  # 20 s back-off after the second attempt
    assert not at("pull-fail", 0, 10_000).ready


def test_flaky_pull_clears_at_the_first_attempt_after_its_seconds():
    assert at("pull-flaky", 5, 4).state["waiting"]["reason"] == "ImagePullBackOff"
    assert not at("pull-flaky", 5, 11.9).ready
    ok = at("pull-flaky", 5, 12.0)
    assert ok.ready and ok.state == {"running": {"startedAt": "t+12"}}


def test_crash_loop_restarts_with_doubling_back_off_and_keeps_the_last_termination():
    first = at("crash", 0, 1.5)
    assert first.state["running"] and first.restart_count == 0
    down = at("crash", 0, 2.5)
    assert down.state["waiting"]["reason"] == "CrashLoopBackOff" and down.restart_count == 1
    assert down.last_state["terminated"]["exitCode"] == 1 and down.next_change == 12.0
    again = at("crash", 0, 12.5)
    assert again.state["running"] and again.restart_count == 1
    assert at("crash", 0, 13.5).next_change == 33.0  # 20 s back-off before the third run


@pytest.mark.parametrize("attempt, expected", [(1, 10), (2, 20), (5, 160), (6, 300), (30, 300)])
def test_back_off_doubles_to_the_kubelets_cap(attempt, expected):
    assert timeline.backoff(attempt) == expected
