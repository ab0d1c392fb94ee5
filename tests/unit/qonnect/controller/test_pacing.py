"""pacing.py (issue 21, items 4 and 5): one writer per spec version, and a calm failback."""

from __future__ import annotations

import logging

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from qonnect.controller.detector import Trigger
from qonnect.controller.pacing import Pacer, gain_of


def spec_changed(app: str = "shop", version: int = 2) -> Trigger:
    return Trigger(
        app, "spec-changed", f"application spec changed: version 1 -> {version}", (), None, version
    )


def drift(app: str) -> Trigger:
    why = "QoS drift: objective 0.5000 -> 0.6500 with the engine's weighted scorer beyond hysteresis 0.1"
    return Trigger(app, "qos-drift", why)


def events(*records: tuple[str, int | None, float], role: str = "admin") -> list[dict]:
    out = []
    for i, (state, version, ts) in enumerate(records, 1):
        body = intent.event("shop", state, {"scorer": "optimal", "exclude": []}, version)
        out.append({**body, "id": i, "ts": ts, "role": role})
    return out


def test_a_version_the_deploy_is_applying_waits(caplog: pytest.LogCaptureFixture):
    pacer = Pacer(intent_ttl=600)
    with caplog.at_level(logging.WARNING, logger="qonnect.controller"):
        keep, observe = pacer.pace(
            [spec_changed()], [], 1000.0, lambda app: events(("applying", None, 990.0))
        )
    assert keep == [] and observe == []
    assert "being applied by a deploy" in caplog.text
    assert "shop" in pacer.waiting()


def test_the_version_the_deploy_placed_is_observed_not_placed_again():
    pacer = Pacer()
    trail = events(("applying", None, 990.0), ("applied", 2, 995.0))
    keep, observe = pacer.pace([spec_changed(version=2)], [], 1000.0, lambda app: trail)
    assert keep == [] and observe == [("shop", 2)]


def test_the_controller_places_a_version_no_deploy_is_applying():
    pacer = Pacer(intent_ttl=600)
    for trail in (
        [],  # stored through the KB API, no deploy
        events(("applying", None, 100.0)),  # a deploy that never reported: stale after the ttl
        events(("applying", None, 990.0), ("failed", None, 995.0)),  # the deploy failed
        events(("applying", None, 990.0), ("applied", 1, 995.0)),  # it placed an older version
        events(("applying", None, 990.0), role="agent"),  # not a deployer's record
    ):
        keep, observe = pacer.pace([spec_changed(version=2)], [], 1000.0, lambda app, t=trail: t)
        assert keep == [spec_changed(version=2)] and observe == [], trail


def test_unreadable_intents_hold_the_version_for_now():
    def broken(app: str) -> list[dict]:
        raise OSError("KB away")

    keep, _observe = Pacer().pace([spec_changed()], [], 1000.0, broken)
    assert keep == []


def test_drift_moves_wait_for_the_stabilisation_window_then_go_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
):
    pacer = Pacer(max_drift_per_minute=2)
    wave = [drift(f"app{i}") for i in range(6)]

    def none(app: str) -> list:
        return []

    recovered = {"cloud-1": 1000.0}
    keep, _observe = pacer.pace(wave, [], 1010.0, none, recovered, stable_seconds=30)
    assert keep == []  # cloud-1 came back 10 s ago: nothing moves yet
    with caplog.at_level(logging.WARNING, logger="qonnect.controller"):
        admitted: dict[str, int] = {}
        for now in range(1031, 1031 + 300):  # one tick a second for five minutes
            keep, _observe = pacer.pace(
                [t for t in wave if t.app not in admitted], [], float(now), none, recovered, 30
            )
            admitted.update({t.app: now for t in keep})
    times = sorted(admitted.values())
    assert len(times) == 6
    for t in times:  # never more than 2 in any 60-second window
        assert sum(1 for u in times if t <= u < t + 60) <= 2
    assert times[-1] - times[0] >= 120  # spread over minutes, not one burst
    gains = [r.getMessage() for r in caplog.records if "move of" in r.getMessage()]
    assert len(gains) == 6 and all("objective 0.5 -> 0.65 (+30.0%)" in g for g in gains)


def test_other_triggers_pass_untouched():
    down = Trigger("shop", "cluster-down", "cluster edge-1 down", ("edge-1",))
    keep, observe = Pacer(max_drift_per_minute=0).pace([down], [("x", 1)], 1.0, lambda app: [])
    assert keep == [down] and observe == [("x", 1)]


def test_gain_of_says_when_it_is_not_reported():
    assert gain_of("QoS drift: something else") == "gain not reported"


def test_no_drift_move_against_the_applications_stored_policy():
    pacer = Pacer(max_drift_per_minute=10)
    for policy in ({"scorer": "optimal", "exclude": []}, {"scorer": "weighted", "exclude": ["fog-2"]}):
        trail = [{**intent.event("app0", "applied", policy, 1), "id": 1, "ts": 1.0, "role": "admin"}]
        keep, _observe = pacer.pace([drift("app0")], [], 1000.0, lambda app, t=trail: t)
        assert keep == [] and "no QoS-drift move" in pacer.waiting()["app0"]
    trail = [
        {
            **intent.event("app0", "applied", {"scorer": "weighted", "exclude": []}, 1),
            "id": 1,
            "ts": 1.0,
            "role": "admin",
        }
    ]
    keep, _observe = pacer.pace([drift("app0")], [], 1000.0, lambda app: trail)
    assert keep == [drift("app0")]


def test_a_version_its_deploy_failed_is_not_placed_by_the_controller():
    """Issue 34.4: the failed version 3 was placed by the controller (spec-changed 2 -> 3) and
    later recorded as succeeded; now it waits, and a later version or a rollback moves on."""
    pacer = Pacer(intent_ttl=600)
    failed = events(("applying", None, 990.0), ("failed", 3, 995.0))
    keep, observe = pacer.pace([spec_changed(version=3)], [], 1000.0, lambda app: failed)
    assert keep == [] and observe == []
    assert "failed in its user's deploy" in pacer.waiting()["shop"]
    # the fix (version 4) stored after the failure: the controller places it if no deploy does
    keep, _waiting = pacer.pace([spec_changed(version=4)], [], 1000.0, lambda app: failed)
    assert keep == [spec_changed(version=4)]


def test_intent_events_are_prose_with_the_record_as_data():
    body = intent.event("shop", "failed", {"scorer": "optimal", "exclude": ["edge-1"]}, 3)
    assert body["message"].startswith("a user's deploy of version 3 of shop failed")
    assert "{" not in body["message"]
    assert body["data"]["version"] == 3 and body["data"]["state"] == "failed"
    parsed = intent.parse({**body, "id": 1, "ts": 1.0, "role": "admin"})
    assert parsed is not None and (parsed["state"], parsed["version"]) == ("failed", 3)
    # an event written before events had data: the record is the message's JSON
    import json

    old = {"type": intent.TYPE, "role": "admin", "id": 2, "ts": 2.0, "message": json.dumps(body["data"])}
    assert intent.parse(old)["version"] == 3


def test_the_drift_check_reads_the_policy_on_the_applications_record():
    """Issue 38: with more events than a scan reads the intent was lost and the drift move made
    against the user's policy; the KB's record of the application holds the policy."""
    pacer = Pacer(max_drift_per_minute=10)
    noise = [{"type": "note", "id": i, "ts": 1.0, "role": "admin"} for i in range(intent.LOOKBACK)]
    record = {"name": "app0", "policy": {"scorer": "optimal", "exclude": []}}
    keep, _observe = pacer.pace([drift("app0")], [], 1000.0, lambda app: noise, records={"app0": record})
    assert keep == [] and "no QoS-drift move" in pacer.waiting()["app0"]
    keep, _observe = pacer.pace([drift("app0")], [], 1000.0, lambda app: noise)  # the scan alone
    assert keep == [drift("app0")]  # ... finds no policy: the old behaviour this guards against
