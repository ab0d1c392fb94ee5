"""The Resource Agent against a real emulated federation and a real KB."""

from __future__ import annotations

import time

import pytest
from _agent_harness import INTERVAL, KB, Agent, wait_for
from support import kubectl, run_qonnect
from support.specs import deployment, managed, namespace, yaml_docs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MANIFESTS = yaml_docs(
    namespace("shop"),
    managed(deployment("web", 2, "nginx", "250m", memory="64Mi", container="web", namespace="shop"), "shop"),
    managed(deployment("huge", 1, "nginx", "64", container="huge", namespace="shop"), "shop"),
    deployment("unmanaged", 1, "nginx", container="c", namespace="shop"),
)


def inventory_cluster(kb, name: str) -> dict:
    return next(c for c in kb.admin.inventory()["clusters"] if c["name"] == name)


def test_inventory_heartbeat_latency_and_workloads_arrive(start_agent, kb, testbed):
    agent = start_agent("edge-1")
    cluster = wait_for(
        lambda: (c := inventory_cluster(kb, "edge-1"))["healthy"] and c["nodes"] and c,
        60,
        "edge-1 to be healthy with nodes in the KB",
    )
    (node,) = cluster["nodes"]
    assert node["name"] == "edge-1-worker" and node["ready"] and node["schedulable"]
    assert node["allocatable"]["cpu"] == 6.0 and node["allocatable"]["memory"] == 7_160_000_000
    assert (node["energy_kwh"], node["price_eur_h"], node["bandwidth_gbps"]) == (0.0024042, 16.3884, 52.5)
    assert node["labels"]["qonnect.io/location"] == "edge-1"
    assert cluster["heartbeat_age"] < 5

    # measured from edge-1's address: the testbed delays edge<->cloud by 25 ms, edge<->fog by 8 ms
    latency = wait_for(
        lambda: (m := kb.admin.latency().get("edge-1", {})) and {"kb", "cloud-1", "fog-1"} <= m.keys() and m,
        30,
        "latencies from edge-1",
    )
    assert latency["cloud-1"] >= 20 and latency["fog-1"] >= 6 and latency["kb"] > 0, latency

    kubeconfig = agent.cluster["kubeconfig"]
    kubectl(kubeconfig, "apply", "-f", "-", input=MANIFESTS)

    def workloads():
        found = {w["name"]: w for w in kb.admin.list_workloads(cluster="edge-1")}
        ready = (
            found.get("web", {}).get("status") == "Healthy"
            and found.get("huge", {}).get("status") == "Failed"
        )
        return ready and found

    found = wait_for(workloads, 60, "web Healthy and huge Failed in the KB")
    assert set(found) == {"web", "huge"}  # the unmanaged Deployment is not reported
    web, huge = found["web"], found["huge"]
    assert (web["application"], web["service"], web["replicas"], web["ready_replicas"]) == (
        "shop",
        "web",
        2,
        2,
    )
    assert huge["reason"].startswith("Unschedulable:") and "Insufficient cpu" in huge["reason"]
    node = wait_for(
        lambda: (n := inventory_cluster(kb, "edge-1")["nodes"][0])["requested"]["cpu"] == 0.5 and n,
        30,
        "the web pods' requests on the node",
    )
    assert node["requested"]["memory"] == 2 * 64 * 2**20
    assert agent.stop() == 0


def test_kb_outage_is_buffered_and_delivered_on_reconnect(start_agent, kb):
    agent = start_agent("fog-1")
    wait_for(lambda: agent.status()["healthy"], 60, "fog-1 to report")
    kb.stop()
    try:
        # read while the KB is down: once it is back the agent may deliver them at any moment
        buffered = wait_for(
            lambda: box if len(box := agent.outbox()) >= 4 else None,
            30,
            "reports to queue up in the outbox",
        )
        assert agent.alive()
    finally:
        kb.start()
    newest_buffered = max(r["seq"] for r in buffered)
    status = wait_for(
        lambda: (s := agent.status())["seq"] > newest_buffered and s,
        30,
        "the buffered reports to be delivered",
    )
    assert status["healthy"] and status["reachable"]
    wait_for(lambda: len(agent.outbox()) <= 1, 10, "the outbox to drain")
    assert "delivered" in agent.log.read_text()
    assert agent.alive()


def test_cluster_failure_is_reported_and_the_agent_keeps_running(start_agent, kb, testbed):
    agent = start_agent("cloud-1")
    wait_for(lambda: agent.status()["reachable"] is True, 60, "cloud-1 to report")
    nodes_before = kb.admin.list_nodes("cloud-1")
    run_qonnect("testbed", "fail", "--dir", testbed["dir"], "cloud-1")
    try:
        status = wait_for(
            lambda: (s := agent.status())["reachable"] is False and s, 30, "cloud-1 unreachable"
        )
        assert status["error"].startswith("listing ") and "Connection refused" in status["error"]
        assert not status["healthy"]
        # the KB keeps what it last knew of the nodes; their age tells how stale it is
        assert [n["name"] for n in kb.admin.list_nodes("cloud-1")] == [n["name"] for n in nodes_before]
        time.sleep(4 * INTERVAL)
        assert agent.alive()
    finally:
        run_qonnect("testbed", "recover", "--dir", testbed["dir"], "cloud-1")
    status = wait_for(lambda: (s := agent.status())["reachable"] is True and s, 60, "cloud-1 reachable again")
    assert status["error"] is None and status["healthy"]


def test_restart_keeps_sequence_numbers_growing(start_agent, kb):
    before = kb.admin.get_cluster("edge-1")["status"]["seq"] or 0
    agent = start_agent("edge-1")
    first = wait_for(lambda: (s := agent.status()["seq"]) > before and s, 60, "a first report")
    assert agent.stop() == 0  # SIGTERM: clean exit
    stopped_at = agent.status()["seq"]
    assert stopped_at >= first
    persisted = int((agent.state_dir / "seq").read_text())
    assert persisted >= stopped_at
    agent.start()
    resumed = wait_for(
        lambda: (s := agent.status()["seq"]) > stopped_at and s, 60, "reports after the restart"
    )
    assert resumed > persisted


def test_agent_reports_to_a_kb_over_verified_tls(tmp_path, testbed):
    from qonnect_testbed.pki import CertificateAuthority, write_server_pair

    ca = CertificateAuthority.create("agent-test-ca")
    ca_file = ca.save(tmp_path / "pki")
    cert, key = write_server_pair(tmp_path / "pki", "kb", *ca.issue_server("kb", ["127.0.0.1"]))
    server = KB(tmp_path / "kb", tls=(cert, key, ca_file))
    agent = None
    try:
        server.start()
        server.admin.register_cluster({"name": "edge-1", "tier": "edge"})
        agent = Agent(server, testbed, "edge-1", tmp_path / "agent")
        agent.start()
        status = wait_for(lambda: (s := agent.status())["healthy"] and s, 60, "a report over TLS")
        assert status["reachable"] is True
        assert "kb" in wait_for(lambda: server.admin.latency().get("edge-1"), 30, "the KB latency")
    finally:
        if agent is not None and agent.proc is not None:
            agent.stop()
        server.stop()
