"""Every surface shows the KB's one answer: free capacity and where an application runs.

Free capacity is defined once (``placement/model.py``: ``Cluster.free`` / ``free_capacity``);
the KB's inventory carries it, the web UI shows that number, ``qonnect status`` and the
inventory plugin import the definition. Where an application runs is ``current_placement``
(current, else desired); the KB's inventory and the controller's snapshot both use it, so the
hysteresis of a re-plan does not depend on who asks. A cluster with a NotReady, a cordoned and a
tainted control-plane node beside its worker tells the definitions apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import pytest
import test_status_page
from ansible_collections.qonnect.core.plugins.inventory.kb import applications_by_cluster, cluster_vars
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    current_placement,
    free_capacity,
)
from qonnect.controller import journal
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support import qonnect_cmd

pytestmark = pytest.mark.timeout(120)
MIXED = "fog-3"
browser = test_status_page.browser  # headless Chromium, one per module


def _node(name: str, cpu: float, memory: int, requested_cpu: float, **facts) -> dict:
    return {
        "name": name,
        "ready": True,
        "allocatable": {"cpu": cpu, "memory": memory, "ephemeral_storage": 10**11},
        "requested": {"cpu": requested_cpu, "memory": 2**28, "ephemeral_storage": 0},
        "labels": {},
        **facts,
    }


@pytest.fixture(scope="module")
def mixed(federation):
    """fog-3 reports a worker plus three nodes no application pod may use; every agent keeps
    reporting (nodes silent for longer than the engine's node heartbeat timeout are no room)."""
    (paper,) = [c for c in federation.paper["clusters"] if c["name"] == MIXED]
    cluster = dict(
        paper,
        nodes=[
            paper["nodes"][0],
            _node(f"{MIXED}-down", 4, 8 * 2**30, 0.0, ready=False),
            _node(f"{MIXED}-cordoned", 2, 4 * 2**30, 0.0, schedulable=False),
            _node(
                f"{MIXED}-control-plane",
                2,
                4 * 2**30,
                0.5,
                taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
            ),
        ],
    )
    fleet = [cluster if c["name"] == MIXED else c for c in federation.paper["clusters"]]
    stop = threading.Event()

    def keep_reporting() -> None:
        while True:
            for c in fleet:
                federation.report(c)
            if stop.wait(2.0):
                return

    keep_reporting_thread = threading.Thread(target=keep_reporting, name="agents", daemon=True)
    for c in fleet:
        federation.report(c)
    keep_reporting_thread.start()
    try:
        yield KBClient(federation.url, federation.reader_token)
    finally:
        stop.set()
        keep_reporting_thread.join(30)


def _status_free(federation) -> dict[str, dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QONNECT_")}
    run = subprocess.run(
        qonnect_cmd(
            "status", "--kb", federation.url, "--token-file", str(federation.reader_token_file), "--json"
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return {c["name"]: c["free"] for tier in json.loads(run.stdout)["tiers"].values() for c in tier}


def test_the_kb_plugin_status_and_page_show_one_free_capacity(federation, mixed, browser: webdriver.Chrome):
    reader = mixed
    clusters = {c["name"]: c for c in reader.inventory()["clusters"]}
    worker = next(n for n in clusters[MIXED]["nodes"] if n["name"] == f"{MIXED}-worker")
    assert len(clusters[MIXED]["nodes"]) == 4
    expected = {r: worker["allocatable"][r] - worker["requested"][r] for r in ("cpu", "memory")}
    for name, cluster in clusters.items():
        defined = free_capacity(cluster)
        assert cluster["free"] == pytest.approx(defined), name  # the KB carries the definition
    assert clusters[MIXED]["free"]["cpu"] == pytest.approx(expected["cpu"])
    assert clusters[MIXED]["free"]["memory"] == expected["memory"]

    records = {r["name"]: r for r in reader.list_clusters()}
    on_screen = _status_free(federation)
    for name, cluster in clusters.items():
        plugin = cluster_vars(cluster, records[name], [])["free"]
        assert plugin == pytest.approx(cluster["free"]), f"inventory plugin, {name}"
        assert on_screen[name]["cpu"] == pytest.approx(round(cluster["free"]["cpu"], 3)), f"status, {name}"
        assert on_screen[name]["memory"] == int(cluster["free"]["memory"]), f"status, {name}"

    browser.get(f"{federation.url}/ui#token={federation.reader_token}")
    want = {
        name: f"free {c['free']['cpu']:.2f} CPU, {c['free']['memory'] / 2**30:.1f} GiB"
        for name, c in clusters.items()
    }

    def shown(driver) -> dict[str, str]:
        cards = driver.find_elements(By.CSS_SELECTOR, ".cluster")
        return {
            e.get_attribute("data-cluster"): m.group(0)
            for e in cards
            if (m := re.search(r"free [0-9.]+ CPU, [0-9.]+ GiB", e.text))
        }

    WebDriverWait(browser, 20).until(lambda d: len(shown(d)) == len(clusters))
    assert shown(browser) == want


def test_the_kb_inventory_and_the_controller_agree_on_where_an_app_runs(federation, mixed):
    """A placement planned but not yet applied (desired only): it is where the app runs for
    everyone, so the engine's hysteresis keeps it whoever re-plans."""
    reader = mixed
    planned = {
        svc: [{"cluster": "fog-2", "replicas": 1, "nodes": ["fog-2-worker"]}]
        for svc in ("productpage", "details", "reviews", "ratings")
    }
    federation.admin.put_placement("bookinfo", {"desired": planned, "current": None})
    record = reader.get_placement("bookinfo")
    assert record["current"] is None and current_placement(record) == planned

    inventory = reader.inventory()
    snapshot, _records = journal.read_snapshot(reader, time.time())
    assert inventory["placements"]["bookinfo"] == planned
    assert snapshot.inventory["placements"] == inventory["placements"]
    assert applications_by_cluster(inventory["placements"]) == {"fog-2": ["bookinfo"]}
