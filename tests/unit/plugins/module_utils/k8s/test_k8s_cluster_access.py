"""One way from a KB cluster record to what reaches the cluster (issue 38, item 4).

``record_target`` / ``record_client`` (k8s/render.py) over ``record_credentials`` and
``client_of`` (k8s/client.py) are what the controller uses; the deploy module's ``auth.resolve``
falls back to the same ``record_credentials``, and the deployer's default client factory is the
same ``client_of``. ``raw_get`` (k8s/client.py) is the agent's and the controller's raw read.
"""

from __future__ import annotations

import types

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.k8s import auth, client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.k8s.records import record_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import (
    record_client,
    record_target,
    target_of,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import ADDRESS_LABEL, DOMAIN_LABEL

CONTENT = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "other",
    "clusters": [{"name": c, "cluster": {"server": f"https://{c}.example:6443"}} for c in ("edge", "other")],
    "users": [{"name": "u", "user": {"token": "t0ken"}}],
    "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in ("edge", "other")],
}
RECORD = {
    "name": "edge-1",
    "tier": "edge",
    "location": "lab-2",
    "server": "https://10.0.0.2:6443",
    "kubeconfig": "/etc/k/edge-1.yaml",
    "context": "edge",
    "labels": {DOMAIN_LABEL: "edge-1.example"},
}


def old_call_site(name: str, record: dict) -> Target:
    """What capacity.py, confirm.py, reconcile.py and selfheal.py each built by hand before."""
    return target_of(name, record, record.get("kubeconfig") or "", record.get("context"))


@pytest.mark.parametrize(
    "record",
    [
        RECORD,
        dict(RECORD, kubeconfig=CONTENT),  # kubeconfig content, not a path
        dict(RECORD, context=None, labels={ADDRESS_LABEL: "203.0.113.7"}),
        {"name": "bare"},  # no credentials: a placement peer of the reconciler, never reached
    ],
    ids=["path", "content", "address-label", "bare"],
)
def test_the_target_keeps_every_field_the_call_sites_passed(record):
    target = record_target(record["name"], record)
    assert target == old_call_site(record["name"], record)
    assert target.kubeconfig == (record.get("kubeconfig") or "")
    assert target.context == record.get("context")
    assert (target.tier, target.location) == (record.get("tier") or "", record.get("location") or "")


def test_domain_and_address_come_from_the_record():
    target = record_target("edge-1", RECORD)
    assert (target.domain, target.address) == ("edge-1.example", "10.0.0.2")
    labelled = record_target("edge-1", dict(RECORD, labels={ADDRESS_LABEL: "203.0.113.7"}))
    assert (labelled.domain, labelled.address) == ("edge-1.qonnect.local", "203.0.113.7")


def test_content_is_passed_as_it_is_stored():
    target = record_target("edge-1", dict(RECORD, kubeconfig=CONTENT))
    assert target.kubeconfig is CONTENT and target.context == "edge"


def test_the_deploy_module_falls_back_to_the_same_credentials():
    """Without user-given credentials, auth.resolve reaches a cluster as the controller does."""
    records = {"edge-1": RECORD, "edge-2": dict(RECORD, name="edge-2", kubeconfig=CONTENT, context=None)}
    resolved = auth.resolve(set(records), records, {}, {})
    assert resolved == {n: record_credentials(r) for n, r in records.items()}


def test_the_client_is_the_shared_one_of_the_records_kubeconfig_and_context(tmp_path):
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(CONTENT))
    record = dict(RECORD, kubeconfig=str(path))
    found = record_client("edge-1", record)
    assert found is client.get_client("edge-1", str(path), "edge")
    assert found.api.configuration.host == "https://edge.example:6443", (
        "the record's context, not the current one"
    )
    from_content = record_client("edge-1", dict(RECORD, kubeconfig=CONTENT))
    assert from_content is client.get_client("edge-1", CONTENT, "edge")


def test_the_deployer_builds_its_clients_with_the_same_factory():
    assert Deployer("a", "a", {}, {}, {}).client_factory is client.client_of


class Response:
    def __init__(self, status: int, body: bytes = b"{}"):
        self.status, self.reason, self.body = status, "Forbidden" if status == 403 else "OK", body

    def read(self) -> bytes:
        return self.body


def recent_api(response: Response, seen: list) -> types.SimpleNamespace:
    """An ApiClient of a recent generated client: param_serialize + call_api."""

    def param_serialize(method, path, **kwargs):
        seen.append((method, path, kwargs["query_params"], kwargs["header_params"]))
        return ("GET", "https://x" + path)

    def call_api(*request, _request_timeout):
        seen.append(_request_timeout)
        return response

    return types.SimpleNamespace(param_serialize=param_serialize, call_api=call_api)


def test_raw_get_reads_json_through_the_clients_transport():
    seen: list = []
    api = recent_api(Response(200, b'{"items":[]}'), seen)
    assert client.raw_get(api, "/api/v1/nodes", {"limit": "1"}, 2.5) == b'{"items":[]}'
    assert seen == [("GET", "/api/v1/nodes", [("limit", "1")], {"Accept": "application/json"}), 2.5]


def test_raw_get_raises_the_clients_error_with_its_status():
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as err:
        client.raw_get(recent_api(Response(403), []), "/api/v1/namespaces", {}, 1.0)
    assert err.value.status == 403


def test_raw_get_on_an_older_client():
    calls = []

    def call_api(path, method, **kwargs):
        calls.append((path, method, kwargs["_preload_content"], kwargs["_request_timeout"]))
        return types.SimpleNamespace(data=b"{}")

    assert client.raw_get(types.SimpleNamespace(call_api=call_api), "/version", {}, 3.0) == b"{}"
    assert calls == [("/version", "GET", False, 3.0)]


def test_the_agent_reads_through_the_library():
    from qonnect.agent import collector

    assert collector.raw_get is client.raw_get
