"""Reports and events "from the future" (issue 25, items 2, 4 and 6), against live KBs on SQLite
and PostgreSQL: a seq or ts beyond the KB's clock plus the skew bound is refused with a 422 naming
the field instead of silencing the real agent; a re-registration (PUT) starts a new epoch; the
real agent, told ``applied: false``, logs it once and continues above the stored seq; event
ownership is case-insensitive; the schema needs a token."""

from __future__ import annotations

import logging
import math
import time

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qonnect.agent.buffer import Outbox
from qonnect.agent.runner import Agent
from qonnect.agent.sequence import Sequence
from qonnect.kb import trust
from test_kb_api import raw


def _refused(call, field: str) -> KBError:
    with pytest.raises(KBError) as err:
        call()
    assert err.value.status == 422 and err.value.message.startswith(f"{field}:"), err.value.message
    return err.value


def _clock_us() -> int:
    return time.time_ns() // 1000


def test_a_seq_or_ts_from_the_future_is_refused_and_the_real_agent_goes_on(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    stolen = live_kb.client("agent", name)
    now = time.time()
    _refused(lambda: stolen.report(name, {"seq": 2**63 - 1, "ts": now}), "seq")
    _refused(lambda: stolen.report(name, {"seq": _clock_us() + 300_000_000, "ts": now}), "seq")
    _refused(lambda: stolen.report(name, {"seq": _clock_us(), "ts": now + 300}), "ts")
    assert live_kb.admin.get_cluster(name)["status"]["seq"] is None  # nothing stored
    real = live_kb.client("agent", name)
    seq = _clock_us()
    assert real.report(name, {"seq": seq, "ts": time.time()}) == {"seq": seq, "applied": True}


def test_a_re_registration_starts_a_new_epoch(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    stolen = live_kb.client("agent", name)
    ahead = _clock_us() + 50_000_000  # within the skew bound: accepted, and it silences...
    assert stolen.report(name, {"seq": ahead, "ts": time.time(), "latencies": {"kb": 9.0}})["applied"]
    real = live_kb.client("agent", name)
    seq = _clock_us()
    assert real.report(name, {"seq": seq, "ts": time.time()})["applied"] is False  # ...for 50 s
    live_kb.admin.request("PUT", f"/api/v1/clusters/{name}", {"tier": "edge"})  # the admin's answer
    assert live_kb.admin.get_cluster(name)["status"]["seq"] is None
    seq = _clock_us()
    assert real.report(name, {"seq": seq, "ts": time.time(), "latencies": {"kb": 1.0}})["applied"] is True
    assert live_kb.admin.get_cluster(name)["status"]["seq"] == seq
    assert live_kb.admin.latency()[name]["kb"] == 1.0  # the latencies' epoch restarted too


def test_the_agent_told_applied_false_logs_once_and_resyncs(live_kb, fresh, caplog):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    stolen = live_kb.client("agent", name)
    poisoned = _clock_us() + 55_000_000
    assert stolen.report(name, {"seq": poisoned, "ts": time.time()})["applied"]

    def observe() -> dict:
        return {"nodes": [{"name": "n1", "ready": True, "allocatable": {"cpu": 4.0}}], "workloads": []}

    agent = Agent(name, observe, live_kb.client("agent", name), Outbox(10), Sequence(), interval=0.01)
    with caplog.at_level(logging.WARNING, logger="qonnect.agent"):
        agent.tick()  # applied: false -> the agent reads the stored seq and continues above it
        agent.tick()
        agent.tick()
    status = live_kb.admin.get_cluster(name)["status"]
    assert status["seq"] > poisoned and status["seq"] == agent.sequence.last
    notes = [r.getMessage() for r in caplog.records if "did not apply" in r.getMessage()]
    assert len(notes) == 1 and str(poisoned) in notes[0], notes
    assert any("applies this agent's reports again" in r.getMessage() for r in caplog.records)


def test_an_agent_whose_own_seq_ran_ahead_numbers_from_the_clock_again(live_kb, fresh, tmp_path):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    state = tmp_path / "seq"
    state.write_text(str(_clock_us() + 3_600_000_000))  # persisted while the clock ran an hour ahead
    agent = Agent(
        name, lambda: {"nodes": None, "workloads": None}, live_kb.client("agent", name), Outbox(10),
        Sequence(state), interval=0.01,
    )  # fmt: skip
    agent.tick()  # refused (422 seq): dropped, numbering restarts from the clock
    agent.tick()
    assert live_kb.admin.get_cluster(name)["status"]["seq"] == agent.sequence.last <= _clock_us()


def test_event_types_by_role_case_insensitively_and_event_ts_bounded(live_kb, fresh):
    name = fresh("edge")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    agent = live_kb.client("agent", name)
    for kind in ("controller.decision", "Controller.decision", "CONTROLLER.migration", "cOnTrOlLeR.x"):
        with pytest.raises(KBError) as err:
            agent.request("POST", "/api/v1/events", {"type": kind, "fencing": {"term": 9, "seq": 9}})
        assert err.value.status == 403 and err.value.message.startswith("type:"), kind
    _refused(lambda: agent.request("POST", "/api/v1/events", {"type": "failure", "ts": 1e12}), "ts")
    # look-alikes of a controller type are no event type at all: a dotted word only
    for kind in (
        " controller.decision",
        "controller.decision ",
        "contro\u013aler.decision",
        "controller decision",
    ):
        _refused(lambda k=kind: agent.request("POST", "/api/v1/events", {"type": k}), "type")
    ok = agent.request("POST", "/api/v1/events", {"type": "failure", "ts": time.time() - 5})
    assert ok["cluster"] == name and ok["role"] == "agent"


def test_an_agent_token_writes_nothing_but_its_own_clusters_observations(live_kb, fresh):
    """The threat model's edge-intruder row, route by route: 403 for placements, the fence,
    applications (and their rollback), tokens, other clusters and cluster registrations."""
    name, other = fresh("edge"), fresh("edge")
    app = fresh("app")
    for cluster in (name, other):
        live_kb.admin.register_cluster({"name": cluster, "tier": "edge"})
    from test_kb_api import spec

    live_kb.admin.put_application(app, spec(app))
    stolen = live_kb.client("agent", name)
    fence = {"term": 2**40, "seq": 0}
    writes = {
        "placement": lambda: stolen.put_placement(app, {"current": {}}, fence),
        "fence": lambda: stolen.raise_fence(fence),
        "application": lambda: stolen.put_application(app, spec(app, energy=0.5)),
        "delete application": lambda: stolen.delete_application(app),
        "rollback": lambda: stolen.roll_back(app, 1, 1, "x", fence),
        "token": lambda: stolen.request("POST", "/api/v1/tokens", {"role": "admin"}),
        "other cluster's report": lambda: stolen.report(other, {"seq": _clock_us(), "ts": time.time()}),
        "own registration": lambda: stolen.update_cluster(name, {"labels": {"cheap": "true"}}),
        "register a cluster": lambda: stolen.register_cluster({"name": fresh("edge"), "tier": "edge"}),
        "delete own cluster": lambda: stolen.delete_cluster(name),
    }
    for what, write in writes.items():
        with pytest.raises(KBError) as err:
            write()
        assert err.value.status == 403, (what, err.value.status, err.value.message)
    assert live_kb.admin.get_application(app)["version"] == 1
    assert live_kb.admin.get_fence()["term"] < 2**40
    assert stolen.report(name, {"seq": _clock_us(), "ts": time.time()})["applied"] is True  # its own: yes


def test_the_schema_needs_a_token(live_kb):
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert raw(live_kb, "GET", path, None, None)[0] == 401, path
        assert raw(live_kb, "GET", path, None, "not-a-token")[0] == 401, path
    status, schema = raw(live_kb, "GET", "/openapi.json", None, live_kb.admin_token)
    assert status == 200 and "/api/v1/clusters/{name}/reports" in schema["paths"]
    assert raw(live_kb, "GET", "/healthz", None, None)[0] == 200  # documented as public


NUMBERS = st.one_of(
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e300, 1e308, 2**53, 2**63 - 1, 2**63, "nan", "1e999", None, True]),
)


@settings(
    max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@given(seq=NUMBERS, ts=NUMBERS, cpu=NUMBERS, price=NUMBERS, ms=NUMBERS)
def test_fuzz_the_report_numbers(live_kb, seq, ts, cpu, price, ms):
    """Negative, huge, NaN and future values: a 200 or a 422 naming a field, never anything else,
    and nothing stored beyond the bounds."""
    name = "fuzz-numbers"
    try:
        live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    except KBError as exc:
        assert exc.status == 409
    body = {
        "seq": seq,
        "ts": ts,
        "nodes": [{"name": "n1", "ready": True, "allocatable": {"cpu": cpu}, "price_eur_h": price}],
        "latencies": {"kb": ms},
    }
    status, answer = raw(
        live_kb, "POST", f"/api/v1/clusters/{name}/reports", _json(body), live_kb.admin_token
    )
    assert status in (200, 422), (status, answer)
    if status == 422:
        assert answer["detail"].startswith(("seq", "ts", "nodes", "latencies")), answer
    stored = live_kb.admin.get_cluster(name)["status"]["seq"]
    assert stored is None or stored <= trust.max_seq(time.time())
    for node in live_kb.admin.request("GET", f"/api/v1/clusters/{name}/nodes")["nodes"]:
        assert node.get("price_eur_h") is None  # never the report's (none is registered)
        assert math.isfinite(node["allocatable"]["cpu"]) and node["allocatable"]["cpu"] >= 0


def _json(body: dict) -> bytes:
    """JSON as a hostile client writes it: NaN and Infinity as bare words, big integers exact."""
    import json

    return json.dumps(body, allow_nan=True).encode()


AGENT_TOKENS: dict[str, str] = {}  # KB url -> the fuzzed cluster's agent token (one per backend)
EDGE = st.sampled_from([-1.0, 0.0, 1.0, 59.0, 61.0, 3600.0])  # seconds from now: around the skew


@settings(
    max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@given(
    ahead=EDGE,
    memory=NUMBERS,
    storage=NUMBERS,
    requested=NUMBERS,
    energy=NUMBERS,
    bandwidth=NUMBERS,
    ms=NUMBERS,
    cpu=st.one_of(NUMBERS, st.sampled_from([16.0, 64.0, 65.0, 1000.0])),
)
def test_fuzz_every_number_of_an_agents_report(
    live_kb, ahead, memory, storage, requested, energy, bandwidth, ms, cpu
):
    """The attacker's view: an agent token, every numeric field of a node and a latency, ts just
    inside and just past the skew. A 200 or a 422 naming the field; what is stored stays within
    the bounds (capacity at most the registered 64 CPU, finite and >= 0; no reported economics)."""
    name = "fuzz-agent"
    try:
        live_kb.admin.register_cluster({"name": name, "tier": "edge", "capacity": {"cpu": 64}})
    except KBError as exc:
        assert exc.status == 409
    token = AGENT_TOKENS.get(live_kb.url) or AGENT_TOKENS.setdefault(
        live_kb.url, live_kb.token("agent", name)
    )
    now = time.time()
    node = {
        "name": "n1",
        "ready": True,
        "allocatable": {"cpu": cpu, "memory": memory, "ephemeral_storage": storage},
        "requested": {"cpu": requested, "memory": requested},
        "energy_kwh": energy,
        "bandwidth_gbps": bandwidth,
        "price_eur_h": 0.0001,
    }
    body = {"seq": _clock_us(), "ts": now + ahead, "nodes": [node], "latencies": {"kb": ms}}
    status, answer = raw(live_kb, "POST", f"/api/v1/clusters/{name}/reports", _json(body), token)
    assert status in (200, 422), (status, answer)
    if status == 422:
        assert answer["detail"].startswith(("seq", "ts", "nodes", "latencies")), answer
    if ahead > trust.SKEW_SECONDS:
        assert status == 422, answer  # ts, unless another field was refused first
    for stored in live_kb.admin.request("GET", f"/api/v1/clusters/{name}/nodes")["nodes"]:
        for key in ("price_eur_h", "energy_kwh", "bandwidth_gbps"):
            assert stored.get(key) is None, (key, stored)  # never the report's (none is registered)
        for resource, value in stored["allocatable"].items():
            assert isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, (resource, value)
        assert stored["allocatable"]["cpu"] <= 64
    for latency in (live_kb.admin.latency().get(name) or {}).values():
        assert math.isfinite(latency) and latency >= 0
