"""The emulator's Jobs, volumes, HPAs, PDBs, quota and CRDs against a real Store, in process."""

from __future__ import annotations

import calendar
import time

import pytest
from qonnect_testbed.store import ApiError, Store
from support.sim import run_scenario, until

pytestmark = pytest.mark.timeout(30)


def _job(name: str, completions: int = 2) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            },
        },
    }


def _deployment(replicas: int) -> dict:
    return {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }


def test_a_job_runs_its_pods_to_completion():
    async def scenario(store: Store, sim) -> None:
        store.create("jobs", "default", _job("once"))

        def complete() -> bool:
            status = store.get("jobs", "default", "once").get("status") or {}
            return any(
                c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions") or []
            )

        await until(complete)
        status = store.get("jobs", "default", "once")["status"]
        assert status["succeeded"] == 2 and "completionTime" in status
        phases = {p["status"]["phase"] for p in store.list("pods", "default")[0]}
        assert phases == {"Succeeded"}

    run_scenario(scenario, "paper", nodes=2)


def test_a_claim_binds_through_the_default_storage_class_and_hpa_pdb_get_a_status():
    async def scenario(store: Store, sim) -> None:
        claim = {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        assert (
            store.create("persistentvolumeclaims", "default", claim)["spec"]["storageClassName"] == "standard"
        )
        store.create("deployments", "default", _deployment(2))
        store.create(
            "horizontalpodautoscalers",
            "default",
            {
                "metadata": {"name": "web"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 1,
                    "maxReplicas": 5,
                },
            },
        )
        store.create(
            "poddisruptionbudgets",
            "default",
            {
                "metadata": {"name": "web"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
        )
        await until(
            lambda: store.get("persistentvolumeclaims", "default", "data")["status"]["phase"] == "Bound"
        )
        volume = store.get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"]
        assert store.get("persistentvolumes", None, volume)["status"]["phase"] == "Bound"
        await until(
            lambda: (
                (store.get("horizontalpodautoscalers", "default", "web").get("status") or {}).get(
                    "currentReplicas"
                )
                == 2
            )
        )
        assert store.get("horizontalpodautoscalers", "default", "web")["status"]["desiredReplicas"] == 2
        await until(
            lambda: (
                (store.get("poddisruptionbudgets", "default", "web").get("status") or {}).get(
                    "currentHealthy"
                )
                == 2
            )
        )
        assert store.get("poddisruptionbudgets", "default", "web")["status"]["disruptionsAllowed"] == 1

    run_scenario(scenario, "paper", nodes=2)


def _pod(name: str, cpu: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }


def test_a_pod_over_quota_is_refused_with_the_real_message():
    store = Store("q")
    store.create(
        "resourcequotas",
        "default",
        {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": "2", "requests.cpu": "1"}}},
    )
    store.create("pods", "default", _pod("a", "500m"))
    with pytest.raises(ApiError) as refused:
        store.create("pods", "default", _pod("b", "600m"))
    assert refused.value.code == 403
    assert refused.value.message == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, '
        "used: requests.cpu=500m, limited: requests.cpu=1"
    )
    assert store.get("resourcequotas", "default", "compute")["status"]["used"] == {
        "pods": "1",
        "requests.cpu": "500m",
    }


def test_a_crd_serves_its_custom_resources_until_it_is_deleted():
    store = Store("c")
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    stored = store.create("customresourcedefinitions", None, crd)
    assert {c["type"]: c["status"] for c in stored["status"]["conditions"]}["Established"] == "True"
    store.create("widgets.example.com", "default", {"metadata": {"name": "w1"}, "spec": {"size": 3}})
    assert [w["metadata"]["name"] for w in store.list("widgets.example.com", "default")[0]] == ["w1"]
    store.delete("customresourcedefinitions", None, "widgets.example.com")
    with pytest.raises(ApiError):
        store.list("widgets.example.com", "default")


def test_a_replicaset_refused_by_a_quota_shows_replica_failure():
    async def scenario(store: Store, sim) -> None:
        store.create(
            "resourcequotas", "default", {"metadata": {"name": "two"}, "spec": {"hard": {"pods": "1"}}}
        )
        store.create("deployments", "default", _deployment(2))

        def failure() -> str:
            for rs in store.list("replicasets", "default")[0]:
                for c in (rs.get("status") or {}).get("conditions") or []:
                    if c["type"] == "ReplicaFailure" and c["status"] == "True":
                        return c["message"]
            return ""

        message = await until(failure)
        assert (
            "is forbidden: exceeded quota: two, requested: pods=1, used: pods=1, limited: pods=1" in message
        )
        assert len(store.list("pods", "default")[0]) == 1

    run_scenario(scenario, "paper", nodes=2)


def _parse_stamp(stamp: str) -> float:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def test_a_cronjob_makes_its_job_when_due():
    async def scenario(store: Store, sim) -> None:
        template = _job("x", completions=1)["spec"]
        cron = store.create(
            "cronjobs",
            "default",
            {
                "metadata": {"name": "tick"},
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": template}},
            },
        )
        # as if it had last run three minutes ago: one Job for the latest missed minute
        store.update(
            "cronjobs",
            "default",
            dict(cron, status={"lastScheduleTime": "2020-01-01T00:00:00Z"}),
            subresource="status",
        )

        def succeeded() -> dict:
            status = store.get("cronjobs", "default", "tick").get("status") or {}
            return status if status.get("lastSuccessfulTime") else {}

        status = await until(succeeded)
        # the Job of the latest due minute (one more may start if the test crosses a minute)
        minutes = int(_parse_stamp(status["lastScheduleTime"]) // 60)
        job = store.get("jobs", "default", f"tick-{minutes}")
        assert job["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
        assert len(store.list("jobs", "default")[0]) <= 2

    run_scenario(scenario, "paper", nodes=2)
