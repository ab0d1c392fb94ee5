#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compute the placement plan of an application, without side effects."""

from __future__ import annotations

DOCUMENTATION = r"""
module: placement
short_description: Compute where an application's services should run, with an explanation
version_added: 0.1.0
description:
  - Runs the qonnect placement engine on the Knowledge Base's current inventory (or a given one) and
    returns the plan and, per service, why each cluster was chosen or rejected.
  - Changes nothing anywhere; use M(qonnect.core.deploy) to apply a plan.
requirements:
  - python >= 3.10
  - PyYAML >= 6.0 (specs read from O(src))
  - jmespath >= 1.0 (specs with a C(filter) constraint)
  - numpy >= 1.24 (faster capacity arithmetic; optional)
  - highspy >= 1.7 (O(scorer=optimal))
  - The Python packages go into the Python that runs the module; with the inventory plugin
    P(qonnect.core.kb#inventory) or C(localhost) that is the Python running Ansible on the controller node
    (C(pip install) into it, C(pipx inject ansible-core PACKAGE) for a pipx install, or the execution
    environment; see the README).
author:
  - qonnect.core developers (@qonnect)
options:
  name:
    description: Name of an application stored in the Knowledge Base. Used when neither O(spec) nor O(src) is given.
    type: str
  spec:
    description: A QoS spec as a mapping, instead of a stored application.
    type: dict
  src:
    description: Path of a QoS spec file, instead of a stored application.
    type: path
  bundles:
    description:
      - QONNECT's tier manifest files beside its Application file (C(cloud_svc), C(fog_svc),
        C(edge_svc) to a file), with O(src) or O(spec) in QONNECT's format.
    type: dict
  explain:
    description: Return the per-service explanation.
    type: bool
    default: true
  inventory:
    description:
      - An inventory in the Knowledge Base's C(/api/v1/inventory) format, used instead of asking the
        Knowledge Base (for what-if planning).
    type: dict
extends_documentation_fragment:
  - qonnect.core.kb
  - qonnect.core.plan
attributes:
  check_mode:
    support: full
    description: The module has no side effects; it runs the same in check mode.
  diff_mode:
    support: none
    description: The module changes nothing.
  platform:
    support: full
    platforms: posix
    description: Runs on any host that reaches the Knowledge Base.
"""

EXAMPLES = r"""
- name: Plan Bookinfo without the fog-2 cluster
  qonnect.core.placement:
    name: bookinfo
    exclude: [fog-2]
  register: planned

- name: Show why
  ansible.builtin.debug:
    var: planned.plan.explanation
"""

RETURN = r"""
plan:
  description: The plan; RV(plan.services) maps each service to its clusters, replicas and nodes.
  returned: success
  type: dict
  contains:
    application:
      description: Name of the application.
      type: str
      returned: success
    scorer:
      description: The scorer that made the plan.
      type: str
      returned: success
    objective:
      description: Value of the default objective for this plan (higher is better).
      type: float
      returned: success
    services:
      description: Service name to a list of C(cluster), C(replicas) and C(nodes).
      type: dict
      returned: success
    explanation:
      description:
        - Service name to every cluster considered, with C(eligible), the C(reason) it was rejected,
          per-criterion C(score) and C(weight), and the C(total).
        - Empty when O(explain=false).
      type: dict
      returned: success
  sample: {"application": "bookinfo", "scorer": "weighted", "objective": 0.42,
           "services": {"ratings": [{"cluster": "edge-1", "replicas": 1, "nodes": ["edge-1-worker"]}]},
           "explanation": {"ratings": [{"cluster": "edge-1", "eligible": true, "reason": "",
                                        "criteria": {"energy": {"score": 1.0, "weight": 1.0}}, "total": 1.0}]}}
errors:
  description: Every problem found in the spec or the inventory.
  returned: failure
  type: list
  elements: str
"""

from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    PLAN_ARGSPEC,
    SOURCE_ARGSPEC,
    argspec,
)
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.placement import run


def main() -> None:
    run_module(
        run,
        argspec(
            SOURCE_ARGSPEC,
            PLAN_ARGSPEC,
            explain={"type": "bool", "default": True},
            inventory={"type": "dict"},
        ),
        mutually_exclusive=[("spec", "src", "name")],
        required_one_of=[("spec", "src", "name")],
    )


if __name__ == "__main__":
    main()
