"""`qonnect testbed` sub-commands against real background federations."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import stat
import statistics
import time
from typing import Iterator

import pytest
import urllib3
import yaml
from _federation import Federation, running
from kubernetes import client
from support import run_qonnect as qonnect
from support import wait_for
from support.specs import deployment

pytestmark = pytest.mark.timeout(90)
CLUSTERS = ["cloud-1", "fog-1", "edge-1"]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with running(
        tmp_path_factory.mktemp("cli"), "--profile", "paper", "--clusters", "3", "--start-delay", "0.2"
    ) as federation:
        yield federation


def tokens(fed: Federation) -> list[str]:
    return [yaml.safe_load(open(c["kubeconfig"]))["users"][0]["user"]["token"] for c in fed.doc["clusters"]]


def test_up_writes_a_self_describing_federation(fed):
    doc = fed.doc
    assert doc["kind"] == "Federation" and doc["name"] == "paper"
    assert [c["name"] for c in doc["clusters"]] == CLUSTERS
    assert [c["address"] for c in doc["clusters"]] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    for cluster in doc["clusters"]:
        assert cluster["server"] == f"https://{cluster['address']}:{cluster['port']}"
        assert cluster["tier"] == cluster["name"].split("-")[0] and cluster["location"] == cluster["name"]
        node = cluster["nodes"][0]
        assert node["profile"] == "energy" and node["cpu"] == 6.0 and node["price_eur_h"] == 16.3884
        path = fed.directory / "kubeconfigs" / f"{cluster['name']}.yaml"
        assert cluster["kubeconfig"] == str(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # the Node carries the labels the Resource Agent reads, matching the federation file
        labels = fed.core(cluster["name"]).read_node(node["name"]).metadata.labels
        assert labels["qonnect.io/tier"] == cluster["tier"]
        assert labels["qonnect.io/location"] == cluster["location"]
        assert float(labels["qonnect.io/energy-kwh"]) == node["energy_kwh"]
        assert float(labels["qonnect.io/price-eur-h"]) == node["price_eur_h"]
        assert float(labels["qonnect.io/bandwidth-gbps"]) == node["bandwidth_gbps"]
        assert labels["kubernetes.io/hostname"] == node["name"]
    assert doc["latency_ms"]["edge-1"]["cloud-1"] == 43.0  # the paper's measured round trip
    for private in ("testbed.json", "pki/ca.key", "pki/edge-1.key"):
        assert stat.S_IMODE((fed.directory / private).stat().st_mode) == 0o600
    public = [(fed.directory / "federation.yaml").read_text(), (fed.directory / "testbed.log").read_text()]
    for token in tokens(fed):
        assert all(token not in text for text in public)


def test_status_reports_clusters_nodes_and_pods(fed):
    fed.apps("fog-1").create_namespaced_deployment("default", deployment("counted", replicas=2))
    try:

        def counted():
            status = json.loads(fed.cli("status", "--json").stdout)
            fog = next(c for c in status["clusters"] if c["name"] == "fog-1")
            return status if fog["pods_running"] == 2 else None

        status = wait_for(counted)
        assert [c["name"] for c in status["clusters"]] == CLUSTERS
        assert all(c["up"] and c["nodes"] == 1 and c["nodes_ready"] == 1 for c in status["clusters"])
        table = fed.cli("status").stdout
        assert "fog-1" in table and "up" in table
    finally:
        fed.apps("fog-1").delete_namespaced_deployment("counted", "default")


def connect_refused(cluster: dict) -> bool:
    try:
        socket.create_connection((cluster["address"], cluster["port"]), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_fail_refuses_connections_and_recover_keeps_state(fed):
    core, apps = fed.core("edge-1"), fed.apps("edge-1")
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "keep"}, "data": {"a": "1"}})
    apps.create_namespaced_deployment("default", deployment("survivor", replicas=1))
    wait_for(lambda: apps.read_namespaced_deployment("survivor", "default").status.ready_replicas == 1)
    pod_uids = {p.metadata.uid for p in core.list_namespaced_pod("default").items}
    out = fed.cli("fail", "edge-1")
    assert "failed" in out.stdout
    try:
        assert connect_refused(fed.cluster("edge-1"))
        with pytest.raises(urllib3.exceptions.MaxRetryError) as info:
            core.read_namespaced_config_map("keep", "default")  # a kept-alive connection is dropped too
        assert isinstance(info.value.reason, urllib3.exceptions.NewConnectionError)
        assert fed.core("cloud-1").list_node().items  # the others still answer
        status = json.loads(fed.cli("status", "--json").stdout)
        assert {c["name"]: c["up"] for c in status["clusters"]} == {
            "cloud-1": True,
            "fog-1": True,
            "edge-1": False,
        }
    finally:
        fed.cli("recover", "edge-1")
    again = core.read_namespaced_config_map("keep", "default")
    assert (again.metadata.uid, again.metadata.resource_version) == (
        cm.metadata.uid,
        cm.metadata.resource_version,
    )
    assert {p.metadata.uid for p in core.list_namespaced_pod("default").items} == pod_uids
    assert apps.read_namespaced_deployment("survivor", "default").status.ready_replicas == 1


def test_set_changes_node_labels_as_an_operator_would(fed):
    fed.cli(
        "set",
        "cloud-1",
        "--price",
        "1.5",
        "--energy",
        "0.003",
        "--bandwidth",
        "40",
        "--label",
        "zone=b",
        "--label",
        "node.kubernetes.io/instance-type-",
    )
    labels = fed.core("cloud-1").read_node("cloud-1-worker").metadata.labels
    assert labels["qonnect.io/price-eur-h"] == "1.5"
    assert labels["qonnect.io/energy-kwh"] == "0.003"
    assert labels["qonnect.io/bandwidth-gbps"] == "40"
    assert labels["zone"] == "b" and "node.kubernetes.io/instance-type" not in labels


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fail", "mars-1"], "no cluster 'mars-1'"),
        (["node-down", "cloud-1", "ghost"], "has no node 'ghost'"),
        (["set", "cloud-1", "--label", "bad key=1"], "not a valid label key"),
        (["set", "cloud-1"], "nothing to change"),
        (["set", "cloud-1", "--price", "-1"], "expected a non-negative number"),
    ],
)
def test_bad_requests_give_clear_errors(fed, args, message):
    result = fed.cli(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def _median_ms(cluster: dict, ca_file: str, source: str | None, token: str) -> float:
    context = ssl.create_default_context(cafile=ca_file)
    conn = http.client.HTTPSConnection(
        cluster["address"],
        cluster["port"],
        context=context,
        timeout=10,
        source_address=(source, 0) if source else None,
    )
    times = []
    try:
        for _request in range(7):
            started = time.perf_counter()
            conn.request("GET", "/version", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            times.append((time.perf_counter() - started) * 1000)
    finally:
        conn.close()
    return statistics.median(times)


def test_latency_follows_the_matrix_from_the_bound_source_address(fed):
    cloud = fed.cluster("cloud-1")
    token = tokens(fed)[0]
    ca = fed.doc["ca_file"]
    from_edge = _median_ms(cloud, ca, fed.cluster("edge-1")["address"], token)
    from_fog = _median_ms(cloud, ca, fed.cluster("fog-1")["address"], token)
    unbound = _median_ms(cloud, ca, None, token)
    assert from_edge >= fed.doc["latency_ms"]["edge-1"]["cloud-1"] == 43.0
    assert from_fog >= fed.doc["latency_ms"]["fog-1"]["cloud-1"] == 19.0
    assert unbound < 15.0
    assert from_edge > from_fog


def test_a_second_testbed_runs_beside_and_stops(fed, tmp_path):
    with running(tmp_path, "--profile", "paper", "--clusters", "1", "--start-delay", "0") as other:
        mine = other.cluster("cloud-1")
        assert mine["address"] == fed.cluster("cloud-1")["address"]
        assert mine["port"] != fed.cluster("cloud-1")["port"]
        assert other.core("cloud-1").list_node().items[0].metadata.name == "cloud-1-worker"
        again = qonnect("testbed", "up", "--dir", str(tmp_path), check=False)
        assert again.returncode == 2 and "already running" in again.stderr
        pid = int((tmp_path / "testbed.pid").read_text())
        other.cli("down")
        assert connect_refused(mine)
        wait_for(lambda: not _alive(pid), timeout=10)
        result = other.cli("status", check=False)
        assert result.returncode == 2 and "no testbed is running" in result.stderr
    assert fed.core("cloud-1").list_node().items  # the first one is untouched


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_up_with_a_bad_profile_fails_clearly(tmp_path):
    result = qonnect("testbed", "up", "--dir", str(tmp_path), "--profile", "nonexistent", check=False)
    assert result.returncode == 2 and "no such file or built-in profile" in result.stderr
    bad = tmp_path / "fleet.yml"
    bad.write_text("clusters:\n  - {name: a, tier: moon}\n")
    result = qonnect("testbed", "up", "--dir", str(tmp_path), "--profile", str(bad), check=False)
    assert result.returncode == 2 and "clusters[0].tier" in result.stderr
    assert not (tmp_path / "testbed.pid").exists()


def test_client_sees_401_without_the_token(fed):
    cfg = client.Configuration()
    cfg.host = fed.cluster("fog-1")["server"]
    cfg.ssl_ca_cert = fed.doc["ca_file"]
    with client.ApiClient(cfg) as api, pytest.raises(client.ApiException) as info:
        client.CoreV1Api(api).list_node()
    assert info.value.status == 401


def test_node_timing_flags_reach_the_emulator(tmp_path):
    """--node-monitor-grace-period and --default-unreachable-toleration-seconds, as on real clusters."""
    with running(
        tmp_path,
        "--profile",
        "tiers",
        "--clusters",
        "1",
        "--start-delay",
        "0.1",
        "--node-monitor-grace-period",
        "1",
        "--default-unreachable-toleration-seconds",
        "2",
    ) as tb:
        core = tb.core("cloud-1")
        created = core.create_namespaced_pod(
            "default",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}},
        )
        assert {t.key: t.toleration_seconds for t in created.spec.tolerations} == {
            "node.kubernetes.io/not-ready": 0,
            "node.kubernetes.io/unreachable": 2,
        }
        wait_for(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running")
        assert core.read_namespaced_pod("p", "default").spec.node_name == "cloud-1-worker"
        down = time.monotonic()
        tb.cli("node-down", "cloud-1", "cloud-1-worker")
        ready = {c.type: c.status for c in core.read_node("cloud-1-worker").status.conditions}["Ready"]
        assert ready == "True"  # still within the grace period
        wait_for(lambda: not core.list_namespaced_pod("default").items, timeout=15)
        assert time.monotonic() - down >= 2.5  # grace, then the toleration
        with open(tb.cluster("cloud-1")["restricted_kubeconfig"], encoding="utf-8") as fh:
            restricted = yaml.safe_load(fh)
        assert restricted["users"][0]["user"]["token"] not in tokens(tb)
