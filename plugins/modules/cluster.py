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

from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    K8S_AUTH_ARGSPEC,
    STATE_ARGSPEC,
    argspec,
)
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.cluster import run


def main() -> None:
    run_module(
        run,
        argspec(
            STATE_ARGSPEC,
            K8S_AUTH_ARGSPEC,
            name={"type": "str", "required": True},
            tier={"type": "str", "choices": ["cloud", "fog", "edge"]},
            location={"type": "str"},
            server={"type": "str"},
            kubeconfig={"type": "path"},
            context={"type": "str"},
            labels={"type": "dict"},
            gather_nodes={"type": "bool", "default": False},
        ),
    )


if __name__ == "__main__":
    main()
