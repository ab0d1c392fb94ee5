"""Fault triggers, start delays with jitter, node timing and canonical quantities of the emulator."""

from __future__ import annotations

import random
import time

import pytest
from qonnect_testbed import fleet
from qonnect_testbed.faults import Fault, StartDelays, backoff, fault_of
from qonnect_testbed.quantities import canonical
from qonnect_testbed.store import ApiError, Store
from support.sim import run_scenario, until

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("image", "fault"),
    [
        ("qonnect.test/pull-fail/app:1", Fault("pull-fail")),
        ("qonnect.test/pull-flaky-4s/app", Fault("pull-flaky", 4.0)),
        ("qonnect.test/crash/a/b:2", Fault("crash")),
        ("qonnect.test/slow-2.5s/app", Fault("slow", 2.5)),
        ("nginx:1.25", None),
        ("qonnect.test/other/app", None),
        ("docker.io/qonnect.test/crash/x", None),
    ],
)
def test_fault_of(image, fault):
    assert fault_of(image) == fault


def test_backoff_doubles_up_to_five_minutes():
    assert [backoff(n) for n in (1, 2, 3, 6, 10)] == [10, 20, 40, 300, 300]


def test_start_delays_first_match_with_jitter_and_slow_images():
    delays = StartDelays.from_profile(
        {
            "start_delays": [
                {"image": "docker.io/istio/*", "seconds": 4, "jitter": 2},
                {"image": "*:slow", "seconds": 9},
            ]
        },
        1.0,
        random.Random(7),
    )
    got = [delays.delay("docker.io/istio/examples-bookinfo-ratings-v1:1.20") for _i in range(200)]
    assert 2.0 <= min(got) < 2.5 and 5.5 < max(got) <= 6.0 and len(set(got)) > 100
    assert delays.delay("x:slow") == 9.0 and delays.delay("nginx") == 1.0
    assert delays.delay("qonnect.test/slow-3s/a") == 4.0
    assert delays.pod_delay(["nginx", "x:slow"]) == 9.0


def test_profile_errors_name_the_field():
    with pytest.raises(fleet.ProfileError, match=r"start_delays\[0\].image"):
        fleet.parse_start_delays([{"seconds": 1}])
    data = fleet.load("tiers")
    data["node_profiles"]["control-plane"]["taints"] = [{"key": "a", "effect": "Sometimes"}]
    with pytest.raises(fleet.ProfileError, match=r"clusters\[0\].nodes\[0\].taints\[0\].effect"):
        fleet.expand(data)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("0.5", "500m"),
        ("2000m", "2"),
        ("1000", "1k"),
        ("1024", "1024"),
        ("1e3", "1e3"),
        ("1.5Gi", "1536Mi"),
        ("2048Mi", "2Gi"),
        ("0.1Gi", "107374182400m"),
        ("7.16G", "7160M"),
        ("0", "0"),
        (6, "6"),
        ("1.5e3", "1500"),
    ],
)
def test_canonical_quantities(given, stored):
    assert canonical(given) == stored


def test_store_refuses_non_quantities_with_400():
    store = Store("q")
    with pytest.raises(ApiError) as err:
        store.create(
            "pods",
            "default",
            {
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]
                },
            },
        )
    assert err.value.code == 400 and "quantities must match the regular expression" in err.value.message


def _run(scenario, **options) -> None:
    run_scenario(scenario, "tiers", **options)


def _pod(name: str, image: str = "nginx:1") -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": image}]}}


def test_profile_start_delay_applies_per_image():
    async def scenario(store, sim):
        started = time.monotonic()
        store.create("pods", "default", _pod("slowpoke", "registry.example/slow:1"))
        store.create("pods", "default", _pod("quick"))
        await until(lambda: store.get("pods", "default", "quick")["status"].get("phase") == "Running")
        assert store.get("pods", "default", "slowpoke")["status"]["containerStatuses"][0]["state"] == {
            "waiting": {"reason": "ContainerCreating"}
        }
        await until(lambda: store.get("pods", "default", "slowpoke")["status"].get("phase") == "Running")
        assert time.monotonic() - started >= 1.0

    _run(scenario, start_delays=[{"image": "registry.example/*", "seconds": 1.2, "jitter": 0.1}])


def test_node_grace_period_and_toleration_seconds():
    async def scenario(store, sim):
        store.create("pods", "default", _pod("p"))
        await until(lambda: store.get("pods", "default", "p")["status"].get("phase") == "Running")
        tolerations = store.get("pods", "default", "p")["spec"]["tolerations"]
        assert {t["key"]: t["tolerationSeconds"] for t in tolerations} == {
            "node.kubernetes.io/not-ready": 1,
            "node.kubernetes.io/unreachable": 1,
        }
        down = time.monotonic()
        sim.nodes.set_down("cloud-1-worker")
        ready = [
            c
            for c in store.get("nodes", None, "cloud-1-worker")["status"]["conditions"]
            if c["type"] == "Ready"
        ]
        assert ready[0]["status"] == "True"  # within the grace period
        await until(
            lambda: (
                not any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in store.get("nodes", None, "cloud-1-worker")["status"]["conditions"]
                )
            )
        )
        assert time.monotonic() - down >= 0.5
        assert store.list("pods", "default")[0]  # tolerated for 1 s more
        await until(lambda: not store.list("pods", "default")[0])
        assert time.monotonic() - down >= 1.5

    _run(
        scenario,
        node_monitor_grace_period=0.5,
        default_unreachable_toleration_seconds=1,
        default_not_ready_toleration_seconds=1,
    )


def test_taints_follow_the_ready_condition():
    """The node lifecycle controller: Ready=False -> not-ready taints, True -> none."""

    async def scenario(store, sim):
        name = "cloud-1-worker"
        node = store.get("nodes", None, name)
        for cond in node["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond.update(status="False", reason="KubeletNotReady", message="container runtime is down")
        store.update("nodes", None, node, subresource="status")

        def taints():
            return {
                (t["key"], t["effect"]) for t in store.get("nodes", None, name)["spec"].get("taints") or []
            }

        await until(
            lambda: (
                taints()
                == {
                    ("node.kubernetes.io/not-ready", "NoSchedule"),
                    ("node.kubernetes.io/not-ready", "NoExecute"),
                }
            )
        )
        sim.nodes.set_up(name)
        await until(lambda: not taints())

    _run(scenario)
