#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compute the placement plan of an application, or what-if failures of the fleet, without side effects."""

from __future__ import annotations

DOCUMENTATION = r"""
module: placement
short_description: Compute where an application's services should run, with an explanation
version_added: 0.1.0
description:
  - Runs the qonnect placement engine on the Knowledge Base's current inventory (or a given one) and
    returns the plan and, per service, why each cluster was chosen or rejected.
  - With O(simulate_failures), returns the plan the controller's heal would commit if those clusters
    failed now, for every application of the fleet, from the planner, stored policies and capacities the
    controller uses.
  - With O(survivability=true), returns the N-1 survivability report of the fleet; every single-cluster
    failure, and every value of the labels in O(survivability_labels).
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
    description:
      - Name of an application stored in the Knowledge Base. Used when neither O(spec) nor O(src) is given.
      - One of O(name), O(spec) and O(src) is required, except with O(simulate_failures) or O(survivability),
        which judge the whole fleet.
    type: str
  spec:
    description:
      - A QoS spec as a mapping, instead of a stored application.
      - With O(simulate_failures) or O(survivability) it joins the fleet's applications (replacing a stored
        one of the same name), with the plan options as its policy; if the inventory holds no placement
        for it, it is first placed as a deploy would place it now.
    type: dict
  src:
    description: Path of a QoS spec file, instead of a stored application (as O(spec)).
    type: path
  bundles:
    description:
      - QONNECT's tier manifest files beside its Application file (C(cloud_svc), C(fog_svc),
        C(edge_svc) to a file), with O(src) or O(spec) in QONNECT's format.
    type: dict
  explain:
    description:
      - Return the per-service explanation (of the plan, and of each application's plan in RV(simulation)).
    type: bool
    default: true
  inventory:
    description:
      - An inventory in the Knowledge Base's C(/api/v1/inventory) format, used instead of asking the
        Knowledge Base (for what-if planning).
      - With O(simulate_failures) or O(survivability), the fleet is this inventory and the one application
        of O(name), O(spec) or O(src); its C(placements) is where it runs now.
    type: dict
  simulate_failures:
    description:
      - Clusters to fail in a what-if; the result's RV(simulation) is the plan the controller's heal would
        commit if they failed now. Nothing is changed.
      - Every unknown cluster name and every label no cluster has is reported at once.
    type: dict
    suboptions:
      clusters:
        description: Names of clusters to fail.
        type: list
        elements: str
      labels:
        description:
          - Label key to value; every cluster with one of these labels fails too (a site, a region).
          - The key C(tier) also matches a cluster's tier.
        type: dict
  survivability:
    description:
      - Return RV(survivability), the N-1 survivability report; every single-cluster failure and every
        value of each label in O(survivability_labels) or stated in an application's C(spec.survive),
        each application judged against the failures it states it must survive (by default any one
        cluster's).
    type: bool
    default: false
  survivability_labels:
    description: Label keys whose every value is failed as one scenario in the report, for example C(site), C(region), C(tier).
    type: list
    elements: str
    default: []
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

- name: What would the controller do if fog-1 and the edge site failed now?
  qonnect.core.placement:
    simulate_failures:
      clusters: [fog-1]
      labels: {site: edge-west}
  register: whatif

- name: Every application must outlive any one cluster's failure and the loss of a site
  qonnect.core.placement:
    survivability: true
    survivability_labels: [site]
  register: n1
  failed_when: not n1.survivability.survivable
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
simulation:
  description:
    - The heal the controller would plan if the clusters of O(simulate_failures) failed now.
    - RV(simulation.applications) has one entry per application with a replica on a failed cluster
      with C(placed), per service C(moves) (C(from) and C(to) cluster lists), C(objective_before),
      C(objective_after) and, when it cannot be re-placed, C(reason) and C(shortfall) (C(service),
      C(resource), C(missing), C(missing_text) such as C(1.5 CPU), C(text)).
  returned: when O(simulate_failures) is given
  type: dict
  contains:
    scenario:
      description: Name of the scenario.
      type: str
      returned: success
    failed:
      description: The clusters failed.
      type: list
      elements: str
      returned: success
    survivable:
      description: Whether every affected application is re-placed within capacity and constraints.
      type: bool
      returned: success
    applications:
      description: Application name to its outcome.
      type: dict
      returned: success
    first_shortfall:
      description: The first service that cannot be re-placed and what it misses, or null.
      type: dict
      returned: success
    spare:
      description: Per tier, the free C(cpu) and C(memory) left on the clusters still up after the heal (and C(cpu_text), C(memory_text)).
      type: dict
      returned: success
  sample: {"scenario": "cluster fog-1", "failed": ["fog-1"], "survivable": true, "first_shortfall": null,
           "applications": {"bookinfo": {"application": "bookinfo", "placed": true,
                                         "moves": {"details": {"from": ["fog-1"], "to": ["fog-2"]}},
                                         "objective_before": 0.64, "objective_after": 0.61}},
           "spare": {"fog": {"cpu": 21.1, "cpu_text": "21.1 CPU", "memory": 24000000000, "memory_text": "22.35Gi"}}}
survivability:
  description:
    - The N-1 survivability report.
    - "RV(survivability.applications) maps each application to C(must_survive) (what it states, or
      C([{cluster: any}])) and C(violations) (each failure it states but does not survive, with the C(reason))."
  returned: when O(survivability=true)
  type: dict
  contains:
    survivable:
      description: Whether every application survives every failure it must survive.
      type: bool
      returned: success
    applications:
      description: Application name to C(must_survive) and C(violations).
      type: dict
      returned: success
    scenarios:
      description: Every scenario evaluated, each as RV(simulation).
      type: list
      elements: dict
      returned: success
    seconds:
      description: How long the report took.
      type: float
      returned: success
    evaluated:
      description: How many scenarios were planned.
      type: int
      returned: success
errors:
  description: Every problem found in the spec, the inventory or the failures to simulate.
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
            simulate_failures={
                "type": "dict",
                "options": {
                    "clusters": {"type": "list", "elements": "str"},
                    "labels": {"type": "dict"},
                },
            },
            survivability={"type": "bool", "default": False},
            survivability_labels={"type": "list", "elements": "str", "default": []},
        ),
        mutually_exclusive=[("spec", "src", "name")],
    )


if __name__ == "__main__":
    main()
