"""One error, one report: whichever layer raises it, every module fails with the same fields.

The modules reach the KB first; here the KB raises each layer's error, so each of the five
modules meets the same exception at the same point. Before the runner (module_utils/module.py)
each module had its own except ladder: the cluster module prefixed K8s errors, deploy added a
fencing hint to every 409, and cluster/cluster_info let spec or engine errors escape as a bare
"MODULE FAILURE".
"""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError, QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement import InventoryError, PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import SpecYamlError
from ansible_collections.qonnect.core.plugins.modules import (
    application,
    cluster,
    cluster_info,
    deploy,
    placement,
)

# Arguments that make each module's first step a KB call.
MODULES = {
    "application": (application, {"name": "shop", "state": "absent"}),
    "cluster": (cluster, {"name": "edge-1"}),
    "cluster_info": (cluster_info, {}),
    "placement": (placement, {"name": "shop"}),
    "deploy": (deploy, {"name": "shop"}),
}

# One error of each layer, and the fields its report must have besides failed and msg.
ERRORS = {
    "kb-refused": (KBError(409, "cluster 'edge-1' is already registered"), {"status": 409}),
    "kb-unreachable": (KBError(0, "http://127.0.0.1:9: connection refused"), {"status": 0}),
    "cluster": (K8sError("edge-1", "forbidden", 403), {"status": 403, "cluster": "edge-1"}),
    "spec": (
        QosSpecError(["spec.services[0].tier: 'cloude' is not a tier", "metadata.name: required"]),
        None,
    ),
    "yaml": (SpecYamlError(["app.yml: duplicate key 'spec'"]), None),
    "inventory": (InventoryError(["clusters[0].tier: required"]), None),
    "engine": (PlacementError("ratings", "maxLatency", "edge-1 is 25 ms away"), None),
    "fence": (FencedError("fencing: stopped before apply: a newer controller leader holds the fence"), {}),
    "input": (InputError("plan.services.ratings", "expected a list of {cluster, replicas, nodes}"), None),
    "bug": (RuntimeError("boom"), {}),
}


class RaisingKB:
    """A KB whose every call raises the given error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str):
        def call(*_args, **_kwargs):
            raise self.error

        return call


def report(run_module, monkeypatch, name: str, error: BaseException) -> dict:
    from ansible_collections.qonnect.core.plugins.module_utils import module as runner

    module, args = MODULES[name]
    monkeypatch.setattr(runner, "kb_client_from_params", lambda params: RaisingKB(error))
    out = run_module(module, args)
    out.pop("invocation", None)
    return out


@pytest.mark.parametrize("layer", ERRORS)
def test_one_error_reads_the_same_in_every_module(run_module, monkeypatch, layer):
    error, extra = ERRORS[layer]
    reports = {name: report(run_module, monkeypatch, name, error) for name in MODULES}
    first = reports["application"]
    assert all(out == first for out in reports.values()), reports
    assert first["failed"] is True and first["msg"]
    if isinstance(error, QonnectError):
        assert first == {"failed": True, **error.fail_fields()}
    if extra is not None:
        assert set(first) == {"failed", "msg", *extra} and all(first[k] == v for k, v in extra.items())


def test_each_layer_error_maps_its_fields():
    spec = ERRORS["spec"][0].fail_fields()
    assert spec["msg"] == (
        "invalid QoS spec (2 errors): spec.services[0].tier: 'cloude' is not a tier; metadata.name: required"
    )
    assert spec["errors"] == ERRORS["spec"][0].errors
    assert (
        ERRORS["inventory"][0]
        .fail_fields()["msg"]
        .startswith("invalid inventory (1 error): clusters[0].tier")
    )
    engine = ERRORS["engine"][0].fail_fields()
    assert (engine["service"], engine["constraint"]) == ("ratings", "maxLatency")
    assert ERRORS["input"][0].fail_fields()["path"] == "plan.services.ratings"
    many = QosSpecError([f"spec.services[{i}].tier: bad" for i in range(25)]).fail_fields()
    assert many["msg"].endswith("; and 5 more (see errors)") and len(many["errors"]) == 25


def test_context_keeps_the_fields():
    error = PlacementError("ratings", "maxLatency").with_context(lead="not stored: the spec cannot be placed")
    out = error.fail_fields()
    assert out["msg"].startswith("not stored: the spec cannot be placed: service 'ratings' cannot be placed")
    assert (out["service"], out["constraint"]) == ("ratings", "maxLatency")
    hinted = KBError(409, "stale fencing token").with_context(hint="fencing token too old").fail_fields()
    assert hinted == {"msg": "KB error 409: stale fencing token (fencing token too old)", "status": 409}


def test_a_bug_is_reported_as_a_bug_in_one_line(run_module, monkeypatch):
    out = report(run_module, monkeypatch, "cluster_info", KeyError("clusters"))
    assert out["msg"] == "unexpected KeyError: 'clusters' (please report this as a bug)"
    assert "Traceback" not in str(out)
