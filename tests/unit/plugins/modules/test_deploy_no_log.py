"""Issue 25.3: the deploy module's ``kubeconfigs`` is no_log: a kubeconfig token given as
content never reaches the module's result (``invocation.module_args``, what -vvv and AWX job
events show) nor syslog, and the plan still names its clusters."""

from __future__ import annotations

import json
import syslog

import pytest
from ansible_collections.qonnect.core.plugins.modules import deploy

TOKEN = "planted-kubeconfig-token-91c2"


def kubeconfig(cluster: str) -> dict:
    user = f"{cluster}-admin"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": f"https://{cluster}.example:6443"}}],
        "users": [{"name": user, "user": {"token": f"{TOKEN}-{cluster}"}}],
        "contexts": [
            {"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": "default"}}
        ],
        "current-context": cluster,
    }


@pytest.fixture
def syslogged(monkeypatch):
    """What the module hands to syslog (AnsibleModule logs its invocation there)."""
    lines: list[str] = []
    monkeypatch.setattr(syslog, "syslog", lambda *args: lines.append(str(args[-1])))
    monkeypatch.setattr(syslog, "openlog", lambda *args, **kwargs: None)
    return lines


def test_kubeconfig_content_is_masked_and_clusters_stay_readable(run_module, federation, syslogged):
    clusters, _log = federation
    kubeconfigs = {name: kubeconfig(name) for name in clusters}
    out = run_module(deploy, {"name": "bookinfo", "kubeconfigs": kubeconfigs, "kb_token": "qkb_unit_admin"})
    assert out["changed"] and not out.get("failed"), out
    shown = json.dumps(out)
    assert TOKEN not in shown and "qkb_unit_admin" not in shown
    assert out["plan"]["services"]["ratings"][0]["cluster"] == "edge-1"  # not VALUE_SPECIFIED_IN_NO_LOG...
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" not in json.dumps(out["plan"])
    assert set(out["invocation"]["module_args"]["kubeconfigs"]) == set(clusters)
    logged = "\n".join(syslogged)
    assert "Invoked with" in logged and "kubeconfigs=NOT_LOGGING_PARAMETER" in logged
    assert TOKEN not in logged and "qkb_unit_admin" not in logged
