# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner of the cluster module: register, update or remove a cluster's KB record (reading
its nodes through the cluster's kubeconfig when asked). cluster_info has its own runner, which
needs no Kubernetes client."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import resolve as resolve_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.nodes import common_label, node_facts
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import LOCATION_LABEL, TIER_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule

FIELDS = ("tier", "location", "server", "kubeconfig", "context", "labels")


def desired_record(params: dict, nodes: list | None) -> dict:
    record = {k: params[k] for k in FIELDS if params.get(k) is not None}
    if nodes:
        tier = common_label(nodes, TIER_LABEL)
        location = common_label(nodes, LOCATION_LABEL)
        if "tier" not in record and tier:
            record["tier"] = tier
        if "location" not in record and location:
            record["location"] = location
    return record


def changes(existing: dict, record: dict) -> dict:
    return {k: v for k, v in record.items() if existing.get(k) != v}


def declared(record: dict) -> dict:
    """The fields this module manages (the KB adds status and timestamps)."""
    return {k: record.get(k) for k in ("name", *FIELDS) if k in record}


def gather_credentials(name: str, params: dict) -> tuple:
    """How gather_nodes reaches the cluster: O(kubeconfig), else the K8S_AUTH options as the
    deploy module takes them (a kubeconfig with a context named after the cluster, or an API
    server URL with a bearer token, e.g. from AWX's Kubernetes credential)."""
    if params.get("kubeconfig"):
        return params["kubeconfig"], params.get("context")
    if params.get("k8s_kubeconfig") or params.get("k8s_host"):
        record = {
            "name": name,
            "server": params.get("k8s_host"),
            "kubeconfig": None,
            "context": params.get("context"),
        }
        return resolve_credentials({name}, {name: record}, {}, dict(params, k8s_cluster=name))[name]
    raise InputError(
        "kubeconfig",
        "required when gather_nodes is true (or the K8S_AUTH options: k8s_kubeconfig, "
        "or k8s_host with k8s_api_key)",
    )


def registered(kb: Any, name: str) -> dict | None:
    """The KB's record of the cluster, None when it has none."""
    try:
        return kb.get_cluster(name)
    except KBError as exc:
        if exc.status != 404:
            raise
        return None


def run(module: QonnectModule) -> dict:
    params, kb = module.params, module.kb
    name = params["name"]
    existing = registered(kb, name)
    result: dict = {"changed": False}
    if params["state"] == "absent":
        if existing is not None:
            result.update(changed=True, diff={"before": declared(existing), "after": {}})
            if not module.check_mode:
                kb.delete_cluster(name)
        result["cluster"] = None
        return result

    nodes = None
    if params["gather_nodes"]:
        nodes = node_facts(get_client(name, *gather_credentials(name, params)))
        result["nodes"] = nodes
    record = desired_record(params, nodes)
    if existing is None:
        if "tier" not in record:
            raise InputError("tier", "required to register a new cluster (cloud, fog or edge)")
        record.setdefault("location", name)
        body = dict(record, name=name)
        result.update(changed=True, diff={"before": {}, "after": body})
        result["cluster"] = body if module.check_mode else kb.register_cluster(body)
        return result
    delta = changes(existing, record)
    if delta:
        after = dict(existing, **delta)
        result.update(changed=True, diff={"before": declared(existing), "after": declared(after)})
        result["cluster"] = after if module.check_mode else kb.update_cluster(name, delta)
    else:
        result["cluster"] = existing
    return result
