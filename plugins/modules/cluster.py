#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Register, update or remove a member cluster in the qonnect Knowledge Base."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster
short_description: Register, update or remove a cluster in the qonnect Knowledge Base
version_added: 0.1.0
description:
  - Keeps the Knowledge Base record of one Kubernetes or K3s member cluster as declared.
  - Optionally reads the cluster's nodes through its kubeconfig, returns them as facts and takes the
    tier and location from the nodes' C(qonnect.io/tier) and C(qonnect.io/location) labels when not given.
requirements:
  - python >= 3.10
  - kubernetes >= 29.0.0 (with O(gather_nodes=true))
  - The Python packages go into the Python that runs the module; with the inventory plugin
    P(qonnect.core.kb#inventory) or C(localhost) that is the Python running Ansible on the controller node
    (C(pip install) into it, C(pipx inject ansible-core PACKAGE) for a pipx install, or the execution
    environment; see the README).
author:
  - qonnect.core developers (@qonnect)
options:
  name:
    description: Name of the cluster, unique in the Knowledge Base.
    type: str
    required: true
  state:
    description: Whether the cluster should be registered or removed.
    type: str
    choices: [present, absent]
    default: present
  tier:
    description: Tier of the cluster. Required when registering unless O(gather_nodes) finds it.
    type: str
    choices: [cloud, fog, edge]
  location:
    description: Location of the cluster, as used in the latency matrix. Defaults to the name.
    type: str
  server:
    description: HTTPS URL of the cluster's API server.
    type: str
  kubeconfig:
    description: Path of the kubeconfig the agents and the deploy module use for this cluster.
    type: path
  context:
    description: Context to use in O(kubeconfig).
    type: str
  labels:
    description:
      - Labels of the cluster, used by cluster selectors and the inventory's keyed groups.
      - Label C(qonnect.io/service-domain) sets the DNS domain other clusters use to reach this
        cluster's Services (default C(<name>.qonnect.local)).
    type: dict
  gather_nodes:
    description:
      - Read the cluster's nodes and return them as RV(nodes), through O(kubeconfig) or, without
        it, the K8S_AUTH options (O(k8s_kubeconfig) with a context named after the cluster, or
        O(k8s_host) with O(k8s_api_key), as AWX's Kubernetes credential injects them).
    type: bool
    default: false
extends_documentation_fragment:
  - qonnect.core.kb
  - qonnect.core.k8s_auth
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing to the Knowledge Base.
  diff_mode:
    support: full
    description: Shows the cluster record before and after.
  platform:
    support: full
    platforms: posix
    description: Runs on any host that reaches the Knowledge Base.
"""

EXAMPLES = r"""
- name: Register an edge cluster read from its kubeconfig
  qonnect.core.cluster:
    name: edge-1
    kubeconfig: /etc/qonnect/kubeconfigs/edge-1.yaml
    gather_nodes: true
    labels:
      region: eu
    kb_url: https://kb.example.org
    kb_token: "{{ qonnect_admin_token }}"

- name: Remove a cluster
  qonnect.core.cluster:
    name: edge-1
    state: absent
"""

RETURN = r"""
cluster:
  description: The cluster record after the change (none when removed).
  returned: success
  type: dict
  sample: {"name": "edge-1", "tier": "edge", "location": "edge-1", "labels": {"region": "eu"}}
nodes:
  description: Nodes read through the kubeconfig when O(gather_nodes=true).
  returned: when gather_nodes is true
  type: list
  elements: dict
  sample: [{"name": "edge-1-worker", "ready": true, "schedulable": true,
            "allocatable": {"cpu": "6", "memory": "7160000000"}, "labels": {"qonnect.io/tier": "edge"}}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    kb_argspec,
    kb_client_from_params,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import k8s_auth_argspec
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import resolve as resolve_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.nodes import common_label, node_facts
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import LOCATION_LABEL, TIER_LABEL

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
    raise ValueError(
        "kubeconfig: required when gather_nodes is true (or the K8S_AUTH options: k8s_kubeconfig, "
        "or k8s_host with k8s_api_key)"
    )


def run(module: AnsibleModule) -> dict:
    params = module.params
    kb = kb_client_from_params(params)
    name = params["name"]
    try:
        existing = kb.get_cluster(name)
    except KBError as exc:
        if exc.status != 404:
            raise
        existing = None
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
            raise ValueError("tier: required to register a new cluster (cloud, fog or edge)")
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


def main() -> None:
    module = AnsibleModule(
        argument_spec=kb_argspec(
            name={"type": "str", "required": True},
            state={"type": "str", "choices": ["present", "absent"], "default": "present"},
            tier={"type": "str", "choices": ["cloud", "fog", "edge"]},
            location={"type": "str"},
            server={"type": "str"},
            kubeconfig={"type": "path"},
            context={"type": "str"},
            labels={"type": "dict"},
            gather_nodes={"type": "bool", "default": False},
            **k8s_auth_argspec(),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except KBError as exc:
        module.fail_json(msg=str(exc), status=exc.status)
    except K8sError as exc:
        module.fail_json(msg=f"cannot read nodes: {exc}")
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
