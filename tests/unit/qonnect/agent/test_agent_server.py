"""Issue 34.1: the agent reports its API server's version (``/version``'s gitVersion) and served
group-versions (``/api``, ``/apis``) on (re)connect and then every few minutes, not in every
report; a server whose discovery cannot be read still reports its nodes. Only the HTTP transport
(``raw_get``, the Kubernetes client's) is replaced here; tests/integration/agent reads a real
emulated cluster."""

from __future__ import annotations

import json

import pytest
from qonnect.agent import collector as collector_module
from qonnect.agent.buffer import Outbox
from qonnect.agent.collector import MAX_API_VERSIONS, Collector
from qonnect.agent.runner import Agent
from qonnect.agent.sequence import Sequence

DISCOVERY = {
    "/version": {"major": "1", "minor": "34", "gitVersion": "v1.34.4"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {
        "kind": "APIGroupList",
        "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
            {
                "name": "autoscaling",
                "versions": [
                    {"groupVersion": "autoscaling/v2", "version": "v2"},
                    {"groupVersion": "autoscaling/v1", "version": "v1"},
                ],
            },
        ],
    },
}


@pytest.fixture
def api(monkeypatch):
    """The cluster's answers by path; lists are empty, discovery as DISCOVERY says."""
    answers = dict(DISCOVERY)
    asked: list[str] = []

    def raw_get(_api, path, _query, _timeout):
        asked.append(path)
        if path in answers:
            if isinstance(answers[path], Exception):
                raise answers[path]
            return json.dumps(answers[path]).encode()
        return b'{"items": []}'

    monkeypatch.setattr(collector_module, "raw_get", raw_get)
    monkeypatch.setattr(collector_module, "load_api_client", lambda _kc: FakeClient())
    return answers, asked


class FakeClient:
    class configuration:  # the attribute the collector reads
        refresh_api_key_hook = None

    def close(self):
        pass


def test_server_read_on_connect_then_every_interval(api, monkeypatch):
    _answers, asked = api
    clock = [1000.0]
    monkeypatch.setattr(collector_module.time, "monotonic", lambda: clock[0])
    collector = Collector("unused")
    first = collector.collect()
    assert first["server"] == {
        "kube_version": "v1.34.4",
        "api_versions": ["apps/v1", "autoscaling/v1", "autoscaling/v2", "v1"],
    }
    clock[0] += 60
    assert "server" not in collector.collect()  # not every report
    clock[0] += collector_module.SERVER_INTERVAL
    assert "server" in collector.collect()
    collector.close()  # a reconnect reads it again at once
    assert "server" in collector.collect()
    assert asked.count("/version") == 3


def test_unreadable_discovery_does_not_stop_the_report(api):
    answers, _asked = api
    answers["/apis"] = OSError("connection reset")
    out = Collector("unused").collect()
    assert out["nodes"] == [] and "server" not in out


def test_group_versions_are_bounded(api):
    answers, _asked = api
    answers["/apis"] = {
        "groups": [
            {"versions": [{"groupVersion": f"g{i}.example.com/v1"} for i in range(MAX_API_VERSIONS + 50)]}
        ]
    }
    server = Collector("unused").collect()["server"]
    assert len(server["api_versions"]) == MAX_API_VERSIONS


def test_the_report_carries_the_server_only_when_read():
    sent = []

    class KB:
        def report(self, _cluster, report):
            sent.append(report)
            return {}

    observations = iter(
        [
            {"nodes": [], "workloads": [], "server": {"kube_version": "v1.34.4", "api_versions": ["v1"]}},
            {"nodes": [], "workloads": []},
        ]
    )
    agent = Agent("edge-1", lambda: next(observations), KB(), Outbox(10), Sequence(), interval=0.01)
    agent.tick()
    agent.tick()
    assert sent[0]["server"] == {"kube_version": "v1.34.4", "api_versions": ["v1"]}
    assert "server" not in sent[1]
