"""Watch (events in order, 410 Gone for an expired resourceVersion) and list paging."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, watch

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]


def test_watch_sees_changes_in_order(engine, ns):
    core = engine.core()
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    seen: list[tuple[str, str, str]] = []
    w = watch.Watch()

    def consume():
        for event in w.stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=rv,
            timeout_seconds=30,
            field_selector="metadata.name=w",
        ):
            obj = event["object"]
            seen.append((event["type"], obj.metadata.name, (obj.data or {}).get("k", "")))
            if event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"k": "1"}})
    core.patch_namespaced_config_map("w", ns, {"data": {"k": "2"}})
    core.delete_namespaced_config_map("w", ns)
    thread.join(timeout=40)
    assert seen == [("ADDED", "w", "1"), ("MODIFIED", "w", "2"), ("DELETED", "w", "2")]


def _replay(core: client.CoreV1Api, ns: str, rv: str) -> list[tuple[str, str]]:
    """The events a watch from rv delivers at once (ADDED/MODIFIED with data k)."""
    out = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=rv,
        timeout_seconds=2,
        field_selector="metadata.name=old",
    ):
        out.append((event["type"], (event["object"].data or {}).get("k", "")))
    return out


def test_watch_from_an_old_resource_version_replays_until_it_expires(engine, ns):
    """Both replay from a recent resourceVersion. It expires (410 Gone) on the emulator after 1000
    later writes in the cluster; on the real engine only at etcd's compaction (every 5 min)."""
    core = engine.core()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "old"}, "data": {"k": "0"}})
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.patch_namespaced_config_map("old", ns, {"data": {"k": "1"}})
    assert _replay(core, ns, rv) == [("MODIFIED", "1")]
    for i in range(1001):
        core.patch_namespaced_config_map("old", ns, {"data": {"k": str(i + 2)}})
    if engine.is_emulator:
        with pytest.raises(client.ApiException) as err:
            _replay(core, ns, rv)
        assert err.value.status == 410
    else:
        replayed = _replay(core, ns, rv)
        assert replayed[0] == ("MODIFIED", "1") and replayed[-1] == ("MODIFIED", "1002")


def test_list_paging_with_limit_and_continue(engine, ns):
    core = engine.core()
    for i in range(7):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}", "labels": {"page": "yes"}}})
    names, token, pages = [], None, []
    while True:
        page = core.list_namespaced_config_map(ns, label_selector="page=yes", limit=3, _continue=token)
        pages.append(len(page.items))
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == [3, 3, 1] and names == [f"cm-{i}" for i in range(7)]
    first = core.list_namespaced_config_map(ns, limit=2)
    total = len(core.list_namespaced_config_map(ns).items)  # the 7 plus kube-root-ca.crt
    assert total == 8 and first.metadata.remaining_item_count == total - 2
