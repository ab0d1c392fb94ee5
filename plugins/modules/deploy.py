#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Apply an application's placement plan to its clusters and record it in the Knowledge Base."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy
short_description: Deploy an application across clusters by its placement plan
version_added: 0.1.0
description:
  - Applies each service's manifests to the clusters the plan gives it, with server-side apply
    (field manager C(qonnect)), in parallel on all clusters.
  - Creates the namespace, labels every object C(app.kubernetes.io/managed-by=qonnect),
    C(qonnect.io/application) and C(qonnect.io/service), sets the planned replicas and pins pods to the
    planned nodes with a required node affinity on C(kubernetes.io/hostname).
  - Rewrites cross-cluster addresses. On every cluster of the application that does not run a service,
    each of that service's Services becomes an C(ExternalName) Service pointing at
    C(<name>.<namespace>.svc.<domain>) of the cluster that runs it, where C(<domain>) is the cluster label
    C(qonnect.io/service-domain) (default C(<cluster>.qonnect.local)).
  - Make before break. The new placement is applied and waited for first; only when every new workload is
    ready are addresses switched and objects removed from clusters that left the plan. If a cluster of
    the new plan fails, nothing is removed, the previous placement keeps serving and the module fails
    with per-cluster results.
  - Records the placement (with the fencing token when given) and an event in the Knowledge Base.
  - A second run with the same input changes nothing.
requirements:
  - python >= 3.10
  - kubernetes >= 29.0.0
  - PyYAML >= 6.0
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
      - Name of an application stored in the Knowledge Base (see M(qonnect.core.application)).
      - Used when neither O(spec) nor O(src) is given.
    type: str
  spec:
    description:
      - A QoS spec as a mapping, instead of a stored application.
      - With O(record=true) it is validated and stored in the Knowledge Base first, as
        M(qonnect.core.application) does.
    type: dict
  src:
    description:
      - Path of a QoS spec file, instead of a stored application.
      - With O(record=true) it is validated and stored in the Knowledge Base first, as
        M(qonnect.core.application) does.
    type: path
  bundles:
    description:
      - QONNECT's tier manifest files beside its Application file (C(cloud_svc), C(fog_svc),
        C(edge_svc) to a file), with O(src) or O(spec) in QONNECT's format. Their address
        placeholders (C([CLOUD_CLUSTER_IP]), C([FOG_CLUSTER_IP]), C([EDGE_CLUSTER_IP])) become the
        address of the cluster chosen for that tier (cluster label C(qonnect.io/address), else the
        host of its API server), and their Deployments keep their own C(replicas).
    type: dict
  state:
    description:
      - V(present) places the application, stores a given spec (only once it places), records the
        intended placement, checks every cluster serves every kind, then applies. A failed first
        deploy is rolled back; a failed re-placement leaves the previous placement serving.
      - V(absent) removes every object labelled C(qonnect.io/application) with the application from
        every registered cluster (all namespaces), then its namespaces, and clears its placement.
        A second run, or one for an application the Knowledge Base no longer knows, changes nothing.
    type: str
    choices: [present, absent]
    default: present
  plan:
    description:
      - A plan as returned by M(qonnect.core.placement) (its RV(qonnect.core.placement#module:plan)), or
        just its C(services) mapping. When not given the plan is computed from the Knowledge Base's inventory
        with O(scorer), O(exclude) and O(hysteresis).
      - A target may carry C(role=standby) (a copy the controller makes while another cluster is
        suspect, see the hedged failover in the architecture guide); the recorded placement keeps it.
      - The plan's optional C(hold) lists clusters of the plan this run must not touch (a suspect
        cluster); their objects stay as they are, addresses prefer the other instances, and
        nothing is removed from them.
    type: dict
  wait:
    description: Wait until the new workloads are ready before switching addresses and removing old ones.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for the new workloads to be ready (also the longest wait for a Terminating
        namespace on move-back). Sized for real image pulls; the controller passes its own
        C(--wait-timeout) to every migration.
    type: float
    default: 300
  min_ready_seconds:
    description:
      - A rollout succeeds only when every pod of the new revision of a workload has been Ready
        continuously for this many seconds with no container restart since (the later of the
        pod's Ready condition C(lastTransitionTime) and each container's C(startedAt)), so a
        version whose pods crash-loop, each start briefly Ready, fails its rollout. Applies to
        workloads that set no C(minReadySeconds) of their own; those are ready when Kubernetes
        counts their pods available.
      - A new pod in C(CrashLoopBackOff) after two restarts fails the rollout at once.
      - V(0) turns the window off (readiness as C(kubectl rollout status) sees it).
      - When not set, V(3) for a deploy and V(0) for a controller's migration (O(fencing) given),
        which judges a new version by the agents' reports instead (the workload's failure grace,
        the controller's bound on clusters a version may fail on, then a rollback).
    type: float
  adopt:
    description:
      - Take over objects on the clusters that have the kind, namespace and name of an object of
        the application but were not applied by qonnect for it (created with kubectl, by another
        tool or by another application). Without it (and without C(adopt) in the spec) the deploy
        refuses before any write, in check mode too, listing every such object with its current
        owner; with it, each taken-over object is shown as C(adopt) in the diff.
      - The spec's C(spec.adopt) (whole application) or a service's C(adopt) do the same per spec.
    type: bool
    default: false
  require_survivable:
    description:
      - Refuse the deploy, before anything is changed anywhere (no spec stored, no event, no cluster
        touched), when the fleet with this application placed as planned would not be N-1
        survivable - some application, this one or another, could not be re-placed within capacity
        and constraints after a failure it must survive (every single cluster failure, and the
        label values its C(spec.survive) names; C(spec.survive) unset means any one cluster) that
        it survives without this deploy. A failure the fleet already had is reported in the
        result, not held against this deploy.
      - "Placed as planned: the plan's placement replaces the application's in the inventory and its
        replicas' requests are added to the nodes they are planned on (those of the version running
        now are taken off). Every other application is judged with the policy it was deployed with,
        as the controller heals it."
      - "The failure message names each application, scenario and shortfall, for example
        C(shop: if cluster edge-1 fails: web: 1.5 CPU of cpu missing (room for 1 of 2 replicas))."
    type: bool
    default: false
  record:
    description: Record the placement and an event in the Knowledge Base.
    type: bool
    default: true
  fencing:
    description:
      - Fencing token of the controller deciding this deploy. The Knowledge Base refuses a placement
        whose token is older than the stored one.
    type: dict
    suboptions:
      term:
        description: Raft term of the deciding leader.
        type: int
        required: true
      seq:
        description: Sequence number of the decision within the term.
        type: int
        required: true
  reason:
    description: Why this deploy happens, recorded in the event (for example C(cluster fog-2 failed)).
    type: str
  batch:
    description:
      - Several applications' committed plans deployed in this one run, instead of O(name),
        O(spec) or O(src); what C(migrate.yml) gets from the controller for a batch of decisions
        (one process for all, not one per application). Each item is deployed as O(name) would be,
        with the item's options over the task's; one item failing never stops the others.
      - The result is per item in RV(batch); the task itself fails only on bad input.
    type: list
    elements: dict
    suboptions:
      app:
        description: Name of the application stored in the Knowledge Base.
        type: str
        required: true
      decision_id:
        description: The controller's decision this item carries out (the key of its result).
        type: str
        required: true
      attempt:
        description: The decision's attempt number (for the record; not used by the deploy).
        type: int
      plan:
        description: The committed plan, as O(plan).
        type: dict
      exclude:
        description: Clusters to avoid when the item has no plan, as O(exclude).
        type: list
        elements: str
      scorer:
        description: As O(scorer), for an item without a plan.
        type: str
      hysteresis:
        description: As O(hysteresis), for an item without a plan.
        type: float
      reason:
        description: Why, as O(reason); the event gives it followed by the decision id.
        type: str
      fencing:
        description: The decision's fencing token, as O(fencing).
        type: dict
        required: true
        suboptions:
          term:
            description: Raft term of the deciding leader.
            type: int
            required: true
          seq:
            description: Sequence number of the decision within the term.
            type: int
            required: true
  applications:
    description:
      - Several applications deployed in this one run, instead of O(name), O(spec) or O(src). Each item is a
        QoS spec file (a path, as O(src)) or a mapping with one of C(src), C(spec) or C(name) and its own
        C(scorer), C(hysteresis) and C(exclude) (the task's apply where it gives none).
      - Every spec is read and validated first and every problem of every item is reported at once, before
        anything changes. The fleet is then read once and all the applications are planned in one pass, each
        with its own policy and against the capacity the ones before it took, so together they fit; then each
        is deployed as a single deploy would be (its spec version, intent, history and events).
      - At most O(batch_workers) are deployed at once; one failing never stops the others. The task fails when
        any did; the result is per application in RV(applications).
    type: list
    elements: raw
  batch_workers:
    description: With O(batch) or O(applications), how many of its applications are deployed at once.
    type: int
    default: 10
  kubeconfigs:
    description:
      - Cluster name to its kubeconfig, as a file path or as content (a mapping or YAML text), overriding
        the paths stored in the Knowledge Base and the O(k8s_kubeconfig) / O(k8s_host) credentials.
      - Never logged (syslog, C(-vvv), job events). In the module's output the credentials of kubeconfig
        content (everything under C(users), tokens, keys, passwords) are masked; cluster names stay readable.
    type: dict
extends_documentation_fragment:
  - qonnect.core.kb
  - qonnect.core.plan
  - qonnect.core.k8s_auth
attributes:
  check_mode:
    support: full
    description: Computes the plan and reports the changes with server-side dry runs; touches no cluster.
  diff_mode:
    support: full
    description: Shows each changed object per cluster before and after.
  platform:
    support: full
    platforms: posix
    description: Runs on any host that reaches the Knowledge Base and the clusters' API servers.
  action:
    support: full
    description:
      - Has an action plugin. On the controller (a C(local) connection with the Python that runs Ansible,
        no C(become), no C(async), no task C(environment)) it runs the deploy in the task's own process with
        the same options, checks and results, so the items of a C(loop) import the Kubernetes client once.
      - Set the variable C(qonnect_in_process=false) to run the module in a process of its own instead.
"""

EXAMPLES = r"""
- name: Deploy Bookinfo where the KB's inventory says it fits best
  qonnect.core.deploy:
    name: bookinfo

- name: Move it off a failed cluster (what the controller runs)
  qonnect.core.deploy:
    name: bookinfo
    exclude: [fog-2]
    reason: cluster fog-2 failed
    fencing:
      term: 4
      seq: 17

- name: Apply a plan computed before
  qonnect.core.deploy:
    name: bookinfo
    plan: "{{ planned.plan }}"

- name: Remove Bookinfo from all clusters
  qonnect.core.deploy:
    name: bookinfo
    state: absent

- name: Deploy a team's applications in one run, planned together
  qonnect.core.deploy:
    applications:
      - apps/shop.yml
      - apps/search.yml
      - src: apps/batch-jobs.yml
        scorer: borda
        exclude: [edge-3]
"""

RETURN = r"""
plan:
  description: The plan that was applied.
  returned: always
  type: dict
  sample: {"services": {"ratings": [{"cluster": "edge-1", "replicas": 1, "nodes": ["edge-1-worker"]}]}}
clusters:
  description:
    - Per-cluster result; C(status) is V(ok), V(failed), V(unreachable) or V(skipped),
      C(objects) lists each object with the action taken.
    - C(reasons) lists each workload still not ready when the wait ended, with its current
      revision's pods' own reasons as C(kubectl describe) shows them (V(ImagePullBackOff) and the
      image, V(CrashLoopBackOff) with the last exit code, V(Unschedulable) with the scheduler's
      message, V(FailedCreate) of the ReplicaSet, e.g. exceeded quota); C(error) names them too.
  returned: always
  type: dict
  sample: {"edge-1": {"cluster": "edge-1", "status": "ok", "changed": true, "in_plan": true,
                      "objects": [{"key": "apps/v1/Deployment/bookinfo/ratings-v1", "action": "create"}],
                      "not_ready": [], "reasons": [], "error": null}}
version:
  description: Version of the application spec in the Knowledge Base, when O(src) or O(spec) was stored.
  returned: when src or spec is given with record
  type: int
  sample: 2
message:
  description: One line saying what happened (V(would deploy to ...) in check mode).
  returned: always
  type: str
  sample: deployed to cloud-1, edge-1, fog-1
rolled_back:
  description:
    - After a failed deploy, per cluster it was adding, how many objects were removed again (a failed
      first deploy leaves nothing behind).
  returned: always
  type: dict
  sample: {"cloud-2": 4}
batch:
  description:
    - With O(batch), per decision id, its application (C(app)), whether it was deployed (C(ok)),
      C(changed), one line saying what happened (C(msg)) and the plan applied (C(plan)).
  returned: when batch is given
  type: dict
  sample: {"17": {"app": "shop-3", "ok": true, "changed": true, "msg": "deployed to edge-2",
                  "plan": {"services": {"web": [{"cluster": "edge-2", "replicas": 1}]}}}}
applications:
  description:
    - With O(applications), per application name, whether it was deployed (C(ok)), C(changed), one line saying
      what happened (C(msg)), the plan applied (C(plan)) and the stored spec version (C(version)).
  returned: when applications is given
  type: dict
  sample: {"shop": {"ok": true, "changed": true, "msg": "deployed", "version": 1,
                    "plan": {"services": {"web": [{"cluster": "edge-2", "replicas": 1}]}}}}
errors:
  description: Every problem found in the spec, each as its path, a colon and what is wrong.
  returned: when the spec is invalid
  type: list
  elements: str
  sample: ["spec.services[0].tier: duplicate key (app.yml line 9 column 5; first at line 8 column 5)"]
diff:
  description:
    - "With C(--diff), one entry per changed object, headed C(<cluster>: <Kind namespace/name>) in
      C(before_header) and C(after_header); a created object is shown as the server would create it
      (server-side dry run), a deleted one with an empty C(after); the headers of an object taken over
      with C(adopt) end in C((adopt: taken over from its current owner))."
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before_header": "edge-1: Deployment bookinfo/ratings-v1", "after_header": "edge-1: Deployment bookinfo/ratings-v1",
            "before": {}, "after": {"kind": "Deployment"}}]
"""

from ansible_collections.qonnect.core.plugins.module_utils.deploy_args import DEPLOY_ARGSPEC, DEPLOY_RULES
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import run


def main() -> None:
    # On the controller the action plugin (plugins/action/deploy.py) runs the same runner with
    # the same argument spec in its own process; this is the path everywhere else.
    run_module(run, DEPLOY_ARGSPEC, **DEPLOY_RULES)


if __name__ == "__main__":
    main()
