# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner of the cluster module: register, update or remove a cluster's KB record (reading
its nodes through the cluster's kubeconfig when asked). cluster_info has its own runner, which
needs no Kubernetes client."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import (
    InputError,
    QonnectError,
    fail_fields,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import resolve as resolve_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.economics import gate_economics, node_economics
from ansible_collections.qonnect.core.plugins.module_utils.k8s.nodes import common_label, node_facts
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import LOCATION_LABEL, TIER_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule

FIELDS = ("tier", "location", "server", "kubeconfig", "context", "labels")
# clusters whose nodes O(clusters) reads at once (each read waits on that cluster's API server)
GATHER_WORKERS = 8


def desired_record(params: dict, nodes: list | None) -> dict:
    record = {k: params[k] for k in FIELDS if params.get(k) is not None}
    if nodes:
        tier = common_label(nodes, TIER_LABEL)
        location = common_label(nodes, LOCATION_LABEL)
        if "tier" not in record and tier:
            record["tier"] = tier
        if "location" not in record and location:
            record["location"] = location
        economics = node_economics(nodes)  # the KB takes economics only from registrations
        if economics:
            record["node_economics"] = economics
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


def read_nodes(name: str, params: dict) -> list:
    """The cluster's nodes (gather_nodes). A kubeconfig file this host lacks is named as such:
    the Kubernetes client says only "Invalid kube-config file. No configuration found."."""
    kubeconfig, context = gather_credentials(name, params)
    try:
        return node_facts(get_client(name, kubeconfig, context))
    except Exception:
        if isinstance(kubeconfig, str):
            full = os.path.expanduser(kubeconfig)
            if not os.path.exists(full):
                raise InputError(
                    "kubeconfig", f"{kubeconfig}: no such file on this host (gather_nodes reads it here)"
                ) from None
            if not os.path.isfile(full) or not os.access(full, os.R_OK):
                raise InputError("kubeconfig", f"{kubeconfig}: not a readable file") from None
        raise


def why(name: str, exc: BaseException) -> str:
    """An error's message for the list of failed clusters, which names each cluster itself."""
    msg = fail_fields(exc)["msg"]
    return msg[len(name) + 2 :] if msg.startswith(f"{name}: ") else msg


def registered(kb: Any, name: str) -> dict | None:
    """The KB's record of the cluster, None when it has none."""
    try:
        return kb.get_cluster(name)
    except KBError as exc:
        if exc.status != 404:
            raise
        return None


@dataclass
class Change:
    """What registering one cluster as declared does to its KB record."""

    name: str
    action: str  # "register", "update", "delete" or "none"
    body: dict  # the record to register, or the fields to update
    before: dict
    after: dict
    cluster: dict | None  # the record once the change is made (planned, in check mode)
    held: list[str] = field(default_factory=list)  # label economics not taken without approval


def decide(name: str, params: dict, existing: dict | None, nodes: list | None) -> Change:
    """The change that makes the KB record of ``name`` what ``params`` declare (InputError if
    it cannot be made)."""
    if params["state"] == "absent":
        if existing is None:
            return Change(name, "none", {}, {}, {}, None)
        return Change(name, "delete", {}, declared(existing), {}, None)
    record = desired_record(params, nodes)
    held: list[str] = []
    if existing is not None and "node_economics" in record and not params.get("approve_economics"):
        record["node_economics"], held = gate_economics(record["node_economics"], existing)
        if record["node_economics"] == (existing.get("node_economics") or {}):
            del record["node_economics"]
    if existing is None:
        if "tier" not in record:
            raise InputError("tier", "required to register a new cluster (cloud, fog or edge)")
        record.setdefault("location", name)
        body = dict(record, name=name)
        return Change(name, "register", body, {}, body, body)
    delta = changes(existing, record)
    if not delta:
        return Change(name, "none", {}, declared(existing), declared(existing), existing, held)
    after = dict(existing, **delta)
    return Change(name, "update", delta, declared(existing), declared(after), after, held)


def write(kb: Any, change: Change, check_mode: bool) -> dict | None:
    """Make the change in the KB (nothing in check mode); the cluster's record afterwards."""
    if check_mode or change.action == "none":
        return change.cluster
    if change.action == "register":
        return kb.register_cluster(change.body)
    if change.action == "update":
        return kb.update_cluster(change.name, change.body)
    kb.delete_cluster(change.name)
    return None


def run(module: QonnectModule) -> dict:
    if module.params.get("clusters") is not None:
        return run_many(module)
    params, kb = module.params, module.kb
    name = params["name"]
    existing = registered(kb, name)
    result: dict = {"changed": False}
    nodes = None
    if params["state"] == "present" and params["gather_nodes"]:
        nodes = read_nodes(name, params)
        result["nodes"] = nodes
    change = decide(name, params, existing, nodes)
    if change.action != "none":
        result.update(changed=True, diff={"before": change.before, "after": change.after})
    result["cluster"] = write(kb, change, module.check_mode)
    hold(module, name, change.held, result)
    return result


def hold(module: QonnectModule, name: str, held: list[str], result: dict) -> None:
    """Tell the admin which label economics were not taken (a warning and ``economics_held``)."""
    if held:
        result["economics_held"] = held
        module.warn(
            f"cluster {name}: {len(held)} node economics change(s) from node labels not applied "
            f"(approve_economics=true takes them): {'; '.join(held[:5])}"
            + (f"; and {len(held) - 5} more" if len(held) > 5 else "")
        )


def cluster_params(module: QonnectModule) -> list[dict]:
    """Each entry of O(clusters) as the options of one cluster: what it leaves unset (state,
    gather_nodes, the K8S_AUTH options) comes from the module's own options."""
    params = module.params
    out, seen = [], set()
    for entry in params["clusters"]:
        item = dict(params, **{k: v for k, v in entry.items() if v is not None})
        item.pop("clusters", None)
        if item["name"] in seen:
            raise InputError("clusters", f"cluster {item['name']!r} is listed more than once")
        seen.add(item["name"])
        out.append(item)
    return out


def gather_all(items: list[dict], errors: dict) -> dict:
    """Nodes of every cluster that asks for them, read GATHER_WORKERS clusters at a time (each
    read waits on its cluster's API server); a cluster whose read fails goes to ``errors``."""

    def one(item: dict) -> list:
        return read_nodes(item["name"], item)

    wanted = [i for i in items if i["state"] == "present" and i["gather_nodes"]]
    found: dict = {}
    if not wanted:
        return found
    with ThreadPoolExecutor(max_workers=min(GATHER_WORKERS, len(wanted))) as pool:
        futures = {i["name"]: pool.submit(one, i) for i in wanted}
        for name, future in futures.items():
            try:
                found[name] = future.result()
            except Exception as exc:  # each cluster's own error, told with its name below
                errors[name] = why(name, exc)
    return found


def run_many(module: QonnectModule) -> dict:
    """O(clusters): every cluster in one module run over one KB session. The KB is read once;
    nothing is written unless every cluster's declaration can be applied (all problems are
    reported together, each naming its cluster); a write the KB refuses does not stop the
    others and is reported with them."""
    items = cluster_params(module)
    kb = module.kb
    existing = {c["name"]: c for c in kb.list_clusters()}
    errors: dict[str, str] = {}
    nodes = gather_all(items, errors)
    planned: list[Change] = []
    for item in items:
        name = item["name"]
        if name in errors:
            continue
        try:
            planned.append(decide(name, item, existing.get(name), nodes.get(name)))
        except QonnectError as exc:
            errors[name] = why(name, exc)
    if errors:
        return failed(errors, len(items), "nothing was written")
    results: list[dict] = []
    diff: dict[str, dict] = {"before": {}, "after": {}}
    for change in planned:
        entry: dict = {"name": change.name, "changed": change.action != "none", "action": change.action}
        try:
            entry["cluster"] = write(kb, change, module.check_mode)
        except QonnectError as exc:
            errors[change.name] = why(change.name, exc)
            continue
        if change.name in nodes:
            entry["nodes"] = nodes[change.name]
        hold(module, change.name, change.held, entry)
        if entry["changed"]:
            diff["before"][change.name] = change.before
            diff["after"][change.name] = change.after
        results.append(entry)
    result: dict = {"changed": any(e["changed"] for e in results), "clusters": results, "diff": diff}
    if errors:
        done = ", ".join(e["name"] for e in results if e["changed"]) or "none"
        result.update(failed(errors, len(items), f"clusters changed before: {done}"))
        result["changed"] = any(e["changed"] for e in results)
    return result


def failed(errors: dict, total: int, outcome: str) -> dict:
    """A failed result naming every cluster that failed and why."""
    lines = "; ".join(f"{name}: {why}" for name, why in sorted(errors.items()))
    return {
        "failed": True,
        "changed": False,
        "msg": f"{len(errors)} of {total} cluster(s) failed ({outcome}): {lines}",
        "errors": dict(sorted(errors.items())),
    }
