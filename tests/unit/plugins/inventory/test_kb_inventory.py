"""qonnect.core.kb inventory plugin: hosts, hostvars, groups, constructed options, cache."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleParserError
from ansible_collections.qonnect.core.plugins.inventory import kb as kb_plugin


def node(name, ready=True, cpu=6.0, req=1.0, energy=0.0024, price=16.0):
    return {
        "name": name,
        "ready": ready,
        "schedulable": True,
        "allocatable": {"cpu": cpu, "memory": 8_000, "ephemeral_storage": 100},
        "requested": {"cpu": req, "memory": 1_000, "ephemeral_storage": 0},
        "energy_kwh": energy,
        "price_eur_h": price,
        "bandwidth_gbps": 10.0,
        "labels": {},
    }


DATA = {
    "inventory": {
        "clusters": [
            {
                "name": "cloud-1",
                "tier": "cloud",
                "location": "cloud-1",
                "labels": {"region": "eu"},
                "healthy": True,
                "heartbeat_age": 2.5,
                "nodes": [node("c1a"), node("c1b", price=4.0)],
            },
            {
                "name": "edge-1",
                "tier": "edge",
                "location": "edge-1",
                "labels": {"region": "us-west"},
                "healthy": False,
                "heartbeat_age": 99.0,
                "nodes": [node("e1", ready=False)],
            },
        ],
        "latency_ms": {},
        "placements": {"bookinfo": {"productpage": [{"cluster": "cloud-1", "replicas": 1}]}},
    },
    "records": {
        "cloud-1": {"name": "cloud-1", "server": "https://127.0.0.2:6443", "kubeconfig": "/k/cloud-1.yaml"}
    },
}


@pytest.fixture
def fetched(monkeypatch):
    """Replace the HTTP fetch by DATA; records the URL option each fetch saw (templated)."""
    calls = []

    def fake_fetch(self):
        calls.append(self._option("url"))
        return DATA

    monkeypatch.setattr(kb_plugin.InventoryModule, "fetch", fake_fetch)
    return calls


def groups_of(data):
    return {name: sorted(h.name for h in g.get_hosts()) for name, g in data.groups.items()}


def test_verify_file_wants_qonnect_suffix(plugin, tmp_path):
    for name, ok in (("a.qonnect.yml", True), ("qonnect.yaml", True), ("a.yml", False)):
        (tmp_path / name).write_text("plugin: qonnect.core.kb\n")
        assert plugin.verify_file(str(tmp_path / name)) is ok


def test_hosts_hostvars_and_groups(parse, fetched):
    inv = parse("plugin: qonnect.core.kb\nurl: http://127.0.0.1:1\n")
    assert sorted(inv.hosts) == ["cloud-1", "edge-1"]
    groups = groups_of(inv)
    assert groups["cloud"] == ["cloud-1"] and groups["edge"] == ["edge-1"]
    assert groups["healthy"] == ["cloud-1"] and groups["unhealthy"] == ["edge-1"]
    assert groups["label_region_eu"] == ["cloud-1"] and groups["label_region_us_west"] == ["edge-1"]
    assert groups["app_bookinfo"] == ["cloud-1"]
    hv = inv.get_host("cloud-1").get_vars()
    assert hv["tier"] == "cloud" and hv["server"] == "https://127.0.0.2:6443"
    assert hv["kubeconfig"] == "/k/cloud-1.yaml" and hv["ansible_connection"] == "local"
    assert hv["capacity"]["cpu"] == 12.0 and hv["free"]["cpu"] == 10.0
    assert hv["price_eur_h"] == 20.0 and hv["energy_kwh"] == pytest.approx(0.0024)
    assert hv["heartbeat_age"] == 2.5 and hv["applications"] == ["bookinfo"]
    edge = inv.get_host("edge-1").get_vars()
    assert edge["free"]["cpu"] == 0 and edge["kubeconfig"] is None  # not ready: nothing free


def test_constructed_options_and_unhealthy_filter(parse, fetched):
    inv = parse(
        "plugin: qonnect.core.kb\nurl: http://127.0.0.1:1\ninclude_unhealthy: false\n"
        "compose:\n  cheap: price_eur_h < 25\n"
        "groups:\n  big: capacity.cpu > 8\n"
        "keyed_groups:\n  - key: labels.region\n    prefix: region\n"
    )
    assert sorted(inv.hosts) == ["cloud-1"]
    groups = groups_of(inv)
    assert groups["big"] == ["cloud-1"] and groups["region_eu"] == ["cloud-1"]
    assert inv.get_host("cloud-1").get_vars()["cheap"] is True


def test_templated_url(parse, fetched, monkeypatch):
    monkeypatch.setenv("MY_KB", "http://127.0.0.9:7")
    parse("plugin: qonnect.core.kb\nurl: \"{{ lookup('env', 'MY_KB') }}\"\n")
    assert fetched == ["http://127.0.0.9:7"]


def test_missing_url_is_a_clear_error(parse, monkeypatch):
    monkeypatch.delenv("QONNECT_KB_URL", raising=False)
    with pytest.raises(AnsibleParserError, match="option 'url'"):
        parse("plugin: qonnect.core.kb\n")


def test_unreachable_kb_is_a_clear_error(parse):
    with pytest.raises(AnsibleParserError, match="KB unreachable") as err:
        parse("plugin: qonnect.core.kb\nurl: http://127.0.0.1:9\ntoken: s3cret\ntimeout: 2\n")
    assert "s3cret" not in str(err.value)
