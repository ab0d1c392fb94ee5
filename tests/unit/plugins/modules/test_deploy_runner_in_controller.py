"""The deploy runner in the controller's process (plugin_utils/in_process.py, used by the deploy
action plugin) answers as the module run by Ansible does: same result, same validation errors,
the same masking of kubeconfig credentials; errors through the one mapping, never a traceback."""

from __future__ import annotations

import json

from ansible_collections.qonnect.core.plugins.module_utils.deploy_args import DEPLOY_ARGSPEC, DEPLOY_RULES
from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import run
from ansible_collections.qonnect.core.plugins.modules import deploy
from ansible_collections.qonnect.core.plugins.plugin_utils.in_process import run_in_controller

TOKEN = "planted-kubeconfig-token-5e1d"


def kubeconfig(cluster: str) -> dict:
    """A kubeconfig of the cluster given as content, its credential a planted token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": f"https://{cluster}.example:6443"}}],
        "users": [{"name": "admin", "user": {"token": f"{TOKEN}-{cluster}"}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "admin"}}],
        "current-context": cluster,
    }


def in_process(args: dict, check_mode: bool = False, diff: bool = False, runner=run) -> dict:
    return run_in_controller(
        "qonnect.core.deploy", runner, DEPLOY_ARGSPEC, args, check_mode, diff, **DEPLOY_RULES
    )


def test_the_same_result_as_the_module_in_check_and_diff_mode(run_module, federation):
    args = {"name": "bookinfo", "kb_token": "qkb_unit_admin"}
    by_module = run_module(deploy, args, check_mode=True, diff=True)
    here = in_process(args, check_mode=True, diff=True)
    assert here == by_module
    assert here["changed"] is True and here["diff"], here


def test_kubeconfig_credentials_are_masked_and_clusters_stay_readable(federation):
    clusters, _log = federation
    out = in_process(
        {
            "name": "bookinfo",
            "kubeconfigs": {c: kubeconfig(c) for c in clusters},
            "kb_token": "qkb_unit_admin",
        }
    )
    assert out["changed"] and not out.get("failed"), out
    shown = json.dumps(out)
    assert TOKEN not in shown and "qkb_unit_admin" not in shown
    assert out["plan"]["services"]["ratings"][0]["cluster"] == "edge-1"
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" not in json.dumps(out["plan"])
    assert set(out["invocation"]["module_args"]["kubeconfigs"]) == set(clusters)


def test_options_are_refused_as_the_module_refuses_them(run_module, federation):
    for args in ({"name": "bookinfo", "no_such": 1}, {"name": "bookinfo", "src": "/x.yml"}, {}):
        by_module = run_module(deploy, args)
        here = in_process(args)
        # the module's name as Ansible passes it (run here by hand, AnsibleModule names it basic.py)
        expected = by_module["msg"].replace("(basic.py) module", "(qonnect.core.deploy) module")
        assert here["failed"] is True and here["msg"] == expected, (here, by_module)


def test_a_runner_error_is_one_line_and_warnings_are_kept():
    def broken(module):
        module.warn("first")
        raise RuntimeError("boom")

    out = in_process({"name": "x", "kb_url": "http://127.0.0.1:9"}, runner=broken)
    assert out["failed"] is True
    assert out["msg"] == "unexpected RuntimeError: boom (please report this as a bug)"
    assert out["warnings"] == ["first"]

    def fine(module):
        module.warn("kept")
        return {"changed": False, "warnings": ["also"], "diff": {"before": 1}, "where": {"a", "b"} - {"b"}}

    out = in_process({"name": "x", "kb_url": "http://127.0.0.1:9"}, runner=fine)
    out.pop("invocation")
    assert out == {"changed": False, "warnings": ["kept", "also"], "where": ["a"]}  # no diff unless asked
