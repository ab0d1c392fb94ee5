from __future__ import annotations

import json

import pytest
from qonnect_testbed import fleet


def test_paper_profile_is_the_qonnect_testbed():
    spec = fleet.expand(fleet.load("paper"))
    names = [c.name for c in spec.clusters]
    assert names == ["cloud-1", "cloud-2", "cloud-3", "fog-1", "fog-2", "fog-3", "edge-1", "edge-2", "edge-3"]
    for cluster in spec.clusters:
        assert cluster.tier == cluster.name.split("-")[0]
        assert len(cluster.nodes) == 1
        expected = ["energy", "cost", "performance"][int(cluster.name[-1]) - 1]
        assert cluster.nodes[0].profile == expected
    perf = spec.clusters[2].nodes[0]
    assert (perf.cpu, perf.memory, perf.bandwidth_gbps) == (10.0, 12_500_000_000, 100.0)
    assert (perf.energy_kwh, perf.price_eur_h) == (0.0027335, 32.7726)
    cost = spec.clusters[1].nodes[0]
    assert (cost.cpu, cost.memory, cost.bandwidth_gbps, cost.price_eur_h) == (6.0, 7_160_000_000, 5.0, 0.0042)


def test_latency_matrix_is_measured_for_the_nine_and_from_the_tier_table_beyond():
    m = fleet.expand(fleet.load("paper")).latency_ms
    assert m["cloud-1"]["cloud-1"] == 0.1
    assert m["cloud-1"]["edge-2"] == 43.5 == m["edge-2"]["cloud-1"]  # the paper's measured pairs
    assert m["fog-1"]["edge-1"] == 8.0 == m["edge-1"]["fog-1"]
    assert m["edge-1"]["edge-3"] == 6.0
    assert all(m[a][b] == m[b][a] for a in m for b in m)
    bigger = fleet.expand(fleet.load("paper"), clusters=12).latency_ms
    assert bigger["cloud-4"]["edge-1"] == 44.0 == bigger["edge-1"]["cloud-4"]  # tier table
    assert bigger["cloud-1"]["edge-2"] == 43.5


def test_rescaling_clusters_and_nodes():
    spec = fleet.expand(fleet.load("paper"), clusters=100, nodes=10)
    assert len(spec.clusters) == 100
    assert sum(len(c.nodes) for c in spec.clusters) == 1000
    assert {c.tier for c in spec.clusters} == {"cloud", "fog", "edge"}
    assert len({c.name for c in spec.clusters}) == 100
    # node j of the k-th cluster of a tier gets profile (k-1+j) mod 3
    cloud2 = next(c for c in spec.clusters if c.name == "cloud-2")
    assert [n.profile for n in cloud2.nodes[:3]] == ["cost", "performance", "energy"]
    assert cloud2.nodes[0].name == "cloud-2-worker-1"
    small = fleet.expand(fleet.load("paper"), clusters=2)
    assert [c.name for c in small.clusters] == ["cloud-1", "fog-1"]


def test_explicit_cluster_list_json(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text(
        json.dumps(
            {
                "name": "mine",
                "tiers": ["core", "site"],
                "node_profiles": {"big": {"cpu": "8", "memory": "16Gi", "price_eur_h": 1.5}},
                "clusters": [
                    {
                        "name": "hq",
                        "tier": "core",
                        "location": "berlin",
                        "labels": {"region": "eu"},
                        "nodes": [
                            {"profile": "big"},
                            {"name": "tiny", "cpu": "500m", "memory": "512Mi", "labels": {"gpu": "no"}},
                        ],
                    },
                    {"name": "shop-1", "tier": "site", "nodes": [{"cpu": 2, "memory": "4G"}]},
                ],
                "latency_ms": {"tiers": {"core": {"site": 30}}, "locations": {"berlin": {"shop-1": 42}}},
            }
        )
    )
    spec = fleet.expand(fleet.load(str(path)))
    hq = spec.clusters[0]
    assert hq.location == "berlin" and hq.labels == {"region": "eu"}
    assert hq.nodes[0].name == "hq-worker-1" and hq.nodes[0].memory == 16 * 2**30
    assert hq.nodes[0].price_eur_h == 1.5
    assert hq.nodes[1].cpu == 0.5 and hq.nodes[1].labels == {"gpu": "no"}
    assert spec.latency_ms["berlin"]["shop-1"] == 42.0
    assert spec.latency_ms["shop-1"]["berlin"] == 30.0
    assert [c.name for c in fleet.expand(fleet.load(str(path)), clusters=1).clusters] == ["hq"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"clusters": [{"name": "a", "tier": "moon"}], "node_profiles": {}}, "clusters[0].tier"),
        ({"clusters": [{"name": "A_b", "tier": "cloud"}]}, "clusters[0].name"),
        (
            {"clusters": [{"name": "a", "tier": "cloud", "nodes": [{"cpu": "lots", "memory": 1}]}]},
            "clusters[0].nodes[0].cpu",
        ),
        (
            {"clusters": [{"name": "a", "tier": "cloud", "nodes": [{"profile": "nope"}]}]},
            "clusters[0].nodes[0].profile",
        ),
        ({"clusters": [{"name": "a", "tier": "cloud", "nodes": [{"memory": 1}]}]}, "needs cpu and memory"),
        ({"generate": {"clusters": 0}, "node_profiles": {"x": {"cpu": 1, "memory": 1}}}, "generate.clusters"),
        ({"tiers": ["cloud"]}, "'clusters' list or a 'generate' section"),
    ],
)
def test_bad_profiles_name_the_field(data, field):
    with pytest.raises(fleet.ProfileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        fleet.expand(data)


def test_unknown_profile_lists_builtins(tmp_path):
    with pytest.raises(fleet.ProfileError, match="paper"):
        fleet.load("nonexistent")
    bad = tmp_path / "bad.yml"
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(fleet.ProfileError, match="not valid YAML"):
        fleet.load(str(bad))


def test_too_many_clusters_for_a_list():
    data = {"clusters": [{"name": "a", "tier": "cloud", "nodes": [{"cpu": 1, "memory": 1}]}]}
    with pytest.raises(fleet.ProfileError, match="--clusters"):
        fleet.expand(data, clusters=2)


def test_quantities_and_label_numbers():
    assert fleet.quantity("7.16G", "x") == 7.16e9
    assert fleet.quantity("512Mi", "x") == 512 * 2**20
    assert fleet.quantity("250m", "x") == 0.25
    with pytest.raises(fleet.ProfileError, match="x: expected"):
        fleet.quantity(-1, "x")
    assert fleet.label_number(6.0) == "6"
    assert fleet.label_number(0.0024042) == "0.0024042"
