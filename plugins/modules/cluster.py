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
  - Keeps the Knowledge Base record of one Kubernetes or K3s member cluster as declared, or of every
    cluster in O(clusters) in one run over one Knowledge Base session (the way to register many; one
    module run costs seconds, one cluster in a run milliseconds).
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
    description:
      - Name of the cluster, unique in the Knowledge Base.
      - Required unless O(clusters) is given (one of the two).
    type: str
  clusters:
    description:
      - Many clusters in one run, each with the options of one cluster (O(name) required). An entry's
        unset O(state), O(gather_nodes) and K8S_AUTH options are the module's own.
      - The Knowledge Base is read once. Nothing is written unless every entry can be applied; the
        failure then lists every cluster that cannot, with the reason. A write the Knowledge Base
        refuses does not stop the other clusters; all such failures are reported together.
      - Nodes are read for up to 8 clusters at a time.
      - Returns RV(clusters) instead of RV(cluster) and RV(nodes); the diff is keyed by cluster name.
    type: list
    elements: dict
    suboptions:
      name:
        description: Name of the cluster.
        type: str
        required: true
      state:
        description: Like O(state); the module's O(state) when unset.
        type: str
        choices: [present, absent]
      tier:
        description: Like O(tier).
        type: str
        choices: [cloud, fog, edge]
      location:
        description: Like O(location).
        type: str
      server:
        description: Like O(server).
        type: str
      kubeconfig:
        description: Like O(kubeconfig).
        type: path
      context:
        description: Like O(context).
        type: str
      labels:
        description: Like O(labels).
        type: dict
      gather_nodes:
        description: Like O(gather_nodes); the module's O(gather_nodes) when unset.
        type: bool
      approve_economics:
        description: Like O(approve_economics); the module's O(approve_economics) when unset.
        type: bool
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
      - The nodes' C(qonnect.io/price-eur-h), C(qonnect.io/energy-kwh) and C(qonnect.io/bandwidth-gbps)
        labels become the record's C(node_economics); the Knowledge Base takes a node's economics only
        from the registration, never from agent reports.
      - When the cluster is already registered, a label may only make a node less favourable (a higher
        price or energy, a lower bandwidth) unless O(approve_economics=true), since a member cluster's
        admin can set node labels. Other changes keep the registered economics, are listed in
        RV(economics_held) and warned about.
    type: bool
    default: false
  approve_economics:
    description:
      - Take every node economics value O(gather_nodes) reads from the labels of an already
        registered cluster, also those that make a node cheaper, greener or faster than registered.
      - Review the RV(economics_held) and the diff of a run without it (check mode) first.
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

- name: Register a thousand clusters in one run
  qonnect.core.cluster:
    clusters: "{{ federation.clusters }}"
    gather_nodes: false
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
economics_held:
  description:
    - Node economics from labels that were not applied because they would make a registered cluster's
      node more favourable (or were new or removed) and O(approve_economics) is false; with
      O(clusters), per entry.
  returned: when any was held
  type: list
  elements: str
  sample: ["node edge-3-n1: price_eur_h 2.5 -> 0.0001 from its label needs approval"]
clusters:
  description:
    - With O(clusters), one entry per cluster in the given order; C(action) is C(register),
      C(update), C(delete) or C(none); C(cluster) is the record afterwards; C(nodes) when read.
  returned: when clusters is given
  type: list
  elements: dict
  sample: [{"name": "edge-1", "changed": true, "action": "register",
            "cluster": {"name": "edge-1", "tier": "edge", "location": "edge-1"}}]
errors:
  description: With O(clusters), cluster name -> why that cluster failed.
  returned: when clusters is given and a cluster failed
  type: dict
  sample: {"edge-7": "tier: required to register a new cluster (cloud, fog or edge)"}
"""

from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    K8S_AUTH_ARGSPEC,
    STATE_ARGSPEC,
    argspec,
)
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.cluster import run

# one entry of O(clusters): the options of one cluster (state and gather_nodes unset: the module's)
CLUSTER_OPTIONS = {
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["present", "absent"]},
    "tier": {"type": "str", "choices": ["cloud", "fog", "edge"]},
    "location": {"type": "str"},
    "server": {"type": "str"},
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "labels": {"type": "dict"},
    "gather_nodes": {"type": "bool"},
    "approve_economics": {"type": "bool"},
}


def main() -> None:
    run_module(
        run,
        argspec(
            STATE_ARGSPEC,
            K8S_AUTH_ARGSPEC,
            name={"type": "str"},
            clusters={"type": "list", "elements": "dict", "options": CLUSTER_OPTIONS},
            tier={"type": "str", "choices": ["cloud", "fog", "edge"]},
            location={"type": "str"},
            server={"type": "str"},
            kubeconfig={"type": "path"},
            context={"type": "str"},
            labels={"type": "dict"},
            gather_nodes={"type": "bool", "default": False},
            approve_economics={"type": "bool", "default": False},
        ),
        mutually_exclusive=[["name", "clusters"]],
        required_one_of=[["name", "clusters"]],
    )


if __name__ == "__main__":
    main()
