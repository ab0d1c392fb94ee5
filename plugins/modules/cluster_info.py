#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read clusters, their nodes and health, and the placements from the Knowledge Base."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_info
short_description: List clusters, nodes, health and placements from the qonnect Knowledge Base
version_added: 0.1.0
description:
  - Returns the federation as the Knowledge Base sees it, in one call to its inventory endpoint.
requirements:
  - python >= 3.10
  - The Python packages go into the Python that runs the module; with the inventory plugin
    P(qonnect.core.kb#inventory) or C(localhost) that is the Python running Ansible on the controller node
    (C(pip install) into it, C(pipx inject ansible-core PACKAGE) for a pipx install, or the execution
    environment; see the README).
author:
  - qonnect.core developers (@qonnect)
options:
  name:
    description: Only return these clusters. All clusters when empty.
    type: list
    elements: str
    default: []
  tier:
    description: Only return clusters of this tier.
    type: str
    choices: [cloud, fog, edge]
  healthy_only:
    description: Only return clusters whose agent reported within the KB's heartbeat timeout.
    type: bool
    default: false
extends_documentation_fragment:
  - qonnect.core.kb
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: The module only reads.
  platform:
    support: full
    platforms: posix
    description: Runs on any host that reaches the Knowledge Base.
"""

EXAMPLES = r"""
- name: Healthy fog clusters
  qonnect.core.cluster_info:
    tier: fog
    healthy_only: true
  register: fog

- name: Where does bookinfo run?
  ansible.builtin.debug:
    var: fog.placements.bookinfo
"""

RETURN = r"""
clusters:
  description: Clusters with tier, location, labels, health, heartbeat age and nodes.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "edge-1", "tier": "edge", "location": "edge-1", "healthy": true,
            "heartbeat_age": 3.2, "nodes": [{"name": "edge-1-worker", "ready": true}]}]
placements:
  description: Current placement of each application, service to list of clusters and replicas.
  returned: always
  type: dict
  sample: {"bookinfo": {"ratings": [{"cluster": "edge-1", "replicas": 1}]}}
latency_ms:
  description: Measured round-trip times between locations in milliseconds.
  returned: always
  type: dict
  sample: {"cloud-1": {"edge-1": 25.0}}
"""

from ansible_collections.qonnect.core.plugins.module_utils.args_common import argspec
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.cluster_info import info


def main() -> None:
    run_module(
        info,
        argspec(
            name={"type": "list", "elements": "str", "default": []},
            tier={"type": "str", "choices": ["cloud", "fog", "edge"]},
            healthy_only={"type": "bool", "default": False},
        ),
    )


if __name__ == "__main__":
    main()
