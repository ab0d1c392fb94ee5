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
    type: dict
  scorer:
    description: Scorer used when computing the plan.
    type: str
    choices: [weighted, borda, optimal]
    default: weighted
  exclude:
    description: Clusters not to use when computing the plan.
    type: list
    elements: str
    default: []
  hysteresis:
    description: Hysteresis used when computing the plan.
    type: float
    default: 0.1
  wait:
    description: Wait until the new workloads are ready before switching addresses and removing old ones.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for readiness.
    type: float
    default: 60
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
  kubeconfigs:
    description:
      - Cluster name to its kubeconfig, as a file path or as content (a mapping or YAML text), overriding
        the paths stored in the Knowledge Base and the O(k8s_kubeconfig) / O(k8s_host) credentials.
    type: dict
extends_documentation_fragment:
  - qonnect.core.kb
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
  returned: always
  type: dict
  sample: {"edge-1": {"cluster": "edge-1", "status": "ok", "changed": true, "in_plan": true,
                      "objects": [{"key": "apps/v1/Deployment/bookinfo/ratings-v1", "action": "create"}],
                      "not_ready": [], "error": null}}
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
      (server-side dry run), a deleted one with an empty C(after)."
  returned: when diff mode is on
  type: list
  elements: dict
  sample: [{"before_header": "edge-1: Deployment bookinfo/ratings-v1", "after_header": "edge-1: Deployment bookinfo/ratings-v1",
            "before": {}, "after": {"kind": "Deployment"}}]
"""

from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.qonnect.core.plugins.module_utils.app_source import (
    BUNDLES_ARGSPEC,
    load_app_from_params,
    load_given,
    spec_failure,
    store,
    stored_application,
    unexpected,
)
from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    PLAN_ARGSPEC,
    compute_plan,
    kb_argspec,
    kb_client_from_params,
)
from ansible_collections.qonnect.core.plugins.module_utils.fencing import fence_guard
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import k8s_auth_argspec
from ansible_collections.qonnect.core.plugins.module_utils.k8s.auth import resolve as resolve_credentials
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import (
    Deployer,
    Target,
    service_domain,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import with_grace
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import ADDRESS_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    MAX_REPLICAS,
    QONNECT_API_VERSION,
    QONNECT_PLACEHOLDERS,
    Application,
    QosSpecError,
)


def previous_placement(kb, app: str) -> dict:
    try:
        stored = kb.get_placement(app)
    except KBError as exc:
        if exc.status == 404:
            return {}
        raise
    return current_placement(stored)


def address_of(record: dict) -> str:
    """Where other tiers reach a cluster (QONNECT's [TIER_CLUSTER_IP]): label
    qonnect.io/address, else the host of its API server URL."""
    labels = record.get("labels") or {}
    if labels.get(ADDRESS_LABEL):
        return labels[ADDRESS_LABEL]
    return urlparse(record.get("server") or "").hostname or ""


def targets(
    kb, names: set[str], overrides: dict, records: dict | None = None, params: dict | None = None
) -> dict[str, Target]:
    """Each cluster's credentials (k8s/auth.py: KB paths, kubeconfig content, K8S_AUTH_*)."""
    if records is None:
        records = {c["name"]: c for c in kb.list_clusters()} if names else {}
    credentials = resolve_credentials(names, records, overrides, params or {})
    out = {}
    for name in sorted(names):
        record = records.get(name, {})
        kubeconfig, context = credentials[name]
        out[name] = Target(
            name, kubeconfig, context, service_domain(name, record.get("labels")), address_of(record)
        )
    return out


def plan_services(plan: dict) -> dict:
    """Accept a whole plan or only its services mapping."""
    services = plan.get("services", plan)
    if not isinstance(services, dict):
        raise ValueError(
            "plan.services: expected a mapping of service to a list of {cluster, replicas, nodes}"
        )
    for svc, entries in services.items():
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and e.get("cluster") for e in entries
        ):
            raise ValueError(f"plan.services.{svc}: expected a list of {{cluster, replicas, nodes}}")
        for i, e in enumerate(entries):
            replicas = e.get("replicas", 1)
            if (
                isinstance(replicas, bool)
                or not isinstance(replicas, int)
                or not 1 <= replicas <= MAX_REPLICAS
            ):
                raise ValueError(
                    f"plan.services.{svc}[{i}].replicas: {replicas!r} is not an integer "
                    f"from 1 to {MAX_REPLICAS}"
                )
    return services


def event(kb, body: dict, warnings: list) -> None:
    try:
        kb.post_event(body)
    except KBError as exc:
        warnings.append(f"could not record the event: {exc}")


def remove(module: AnsibleModule, kb) -> dict:
    """Sweep every registered cluster for objects labelled with the application; idempotent,
    and fine for an application the KB no longer knows."""
    params = module.params
    namespace, services = params.get("name"), {}
    if params.get("src") or params.get("spec") is not None:
        app = load_given(params)[0]
    else:
        stored = stored_application(kb, params["name"])
        app = Application.from_dict(stored["application"]) if stored else None
    if app is not None:
        namespace = app.namespace
        services = {s.name: s.manifests for s in app.services}
    name = app.name if app is not None else params["name"]
    previous = previous_placement(kb, name)
    overrides = params.get("kubeconfigs") or {}
    records = {c["name"]: c for c in kb.list_clusters()}
    reachable: dict[str, Target] = {}
    warnings = []
    for cluster in sorted(set(records) | set(overrides)):  # every registered cluster
        try:
            reachable.update(targets(kb, {cluster}, overrides, records, params))
        except ValueError as exc:
            warnings.append(f"cluster {cluster}: not swept: {exc}")
    deployer = Deployer(
        name,
        namespace,
        services,
        {},
        reachable,
        previous=set(reachable),
        check_mode=module.check_mode,
        before_step=fence_guard(kb, params.get("fencing")),
    )
    result = deployer.remove()
    for cluster, res in result["clusters"].items():
        if res["status"] == "unreachable":
            warnings.append(
                f"cluster {cluster} is unreachable ({res['error']}): objects of {name} "
                "may remain there; run the removal again when it is back"
            )
    unreachable = {c for c, r in result["clusters"].items() if r["status"] == "unreachable"}
    result["failed"] = any(r["status"] == "failed" for r in result["clusters"].values())
    if params["record"] and not module.check_mode and previous and not result["failed"] and not unreachable:
        kb.put_placement(name, {"desired": {}, "current": {}}, params.get("fencing"))
        event(
            kb,
            {
                "type": "deploy",
                "reason": "Removed",
                "application": name,
                "message": params.get("reason") or result["message"],
            },
            warnings,
        )
    result["changed"] = result["changed"] or bool(previous)
    result["plan"] = {"services": {}}
    result["warnings"] = result.get("warnings", []) + warnings
    return result


def run(module: AnsibleModule) -> tuple[dict, bool]:
    params = module.params
    kb = kb_client_from_params(params)
    if params["state"] == "absent":
        result = remove(module, kb)
        return result, result["failed"]
    given = bool(params.get("src") or params.get("spec") is not None)
    if given:
        app, body = load_given(params)
    else:
        app = load_app_from_params(params, kb)
    previous = previous_placement(kb, app.name)
    old_clusters = {e["cluster"] for entries in previous.values() for e in entries}
    services = {s.name: [with_grace(m, app.failure_grace_seconds) for m in s.manifests] for s in app.services}
    overrides = params.get("kubeconfigs") or {}
    warnings: list[str] = []

    # Place first: a spec is stored only once it validates and places (issue 13.5).
    plan = dict(params["plan"]) if params.get("plan") else compute_plan(app, kb.inventory(), params, False)
    chosen = plan_services(plan)
    plan["services"] = chosen
    plan.pop("explanation", None)  # the placement module returns it; here it would only be noise
    new_clusters = {e["cluster"] for entries in chosen.values() for e in entries}
    qonnect_format = app.source_format == QONNECT_API_VERSION
    deployer = Deployer(
        app.name,
        app.namespace,
        services,
        chosen,
        targets(kb, new_clusters | old_clusters, overrides, params=params),
        previous=old_clusters,
        check_mode=module.check_mode,
        wait=params["wait"],
        wait_timeout=params["wait_timeout"],
        placeholders={
            f"{s.tier}-svc": QONNECT_PLACEHOLDERS[s.tier]
            for s in app.services
            if s.tier in QONNECT_PLACEHOLDERS
        }
        if qonnect_format
        else None,
        own_replicas=qonnect_format,
        before_step=fence_guard(kb, params.get("fencing")),
    )
    stored = None
    if given and params["record"]:
        stored = store(kb, app, body, module.check_mode)
    placement = {
        svc: [
            {
                "cluster": e["cluster"],
                "replicas": e.get("replicas", 1),
                **({"nodes": list(e["nodes"])} if e.get("nodes") else {}),
            }
            for e in entries
        ]
        for svc, entries in chosen.items()
    }
    # Record the intent before touching a cluster, so whatever this run applies can be found
    # (a controller's fenced deploy has recorded its decision itself).
    intent = (
        params["record"] and not module.check_mode and not params.get("fencing") and placement != previous
    )
    if intent:
        kb.put_placement(app.name, {"desired": placement})
    result = deployer.run()
    result["plan"] = plan
    if stored is not None:
        result["version"] = stored["version"]
        result["changed"] = result["changed"] or stored["changed"]
    result["warnings"] = result.get("warnings", []) + warnings
    if not params["record"] or module.check_mode:
        result["changed"] = result["changed"] or (params["record"] and placement != previous)
        return result, result["failed"]
    if result["failed"]:
        if intent:
            kb.put_placement(app.name, {"desired": previous})
        for name, res in result["clusters"].items():
            if res["status"] in ("failed", "unreachable"):
                event(
                    kb,
                    {
                        "type": "deploy",
                        "reason": "DeployFailed",
                        "application": app.name,
                        "cluster": name,
                        "message": res["error"] or "",
                    },
                    result["warnings"],
                )
        return result, True
    if placement != previous:
        kb.put_placement(app.name, {"desired": placement, "current": placement}, params.get("fencing"))
        result["changed"] = True
    if result["changed"]:
        event(
            kb,
            {
                "type": "deploy",
                "reason": "Deployed",
                "application": app.name,
                "message": params.get("reason") or result["message"],
            },
            result["warnings"],
        )
    return result, False


def main() -> None:
    module = AnsibleModule(
        argument_spec=kb_argspec(
            state={"type": "str", "choices": ["present", "absent"], "default": "present"},
            plan={"type": "dict"},
            wait={"type": "bool", "default": True},
            wait_timeout={"type": "float", "default": 60.0},
            record={"type": "bool", "default": True},
            fencing={
                "type": "dict",
                "options": {
                    "term": {"type": "int", "required": True},
                    "seq": {"type": "int", "required": True},
                },
            },
            reason={"type": "str"},
            kubeconfigs={"type": "dict"},
            **k8s_auth_argspec(),
            **PLAN_ARGSPEC,
            **BUNDLES_ARGSPEC,
        ),
        mutually_exclusive=[("spec", "src", "name")],
        required_one_of=[("spec", "src", "name")],
        supports_check_mode=True,
    )
    from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import (
        InventoryError,
        PlacementError,
    )

    try:
        result, failed = run(module)
    except QosSpecError as exc:
        module.fail_json(**spec_failure(exc))
    except InventoryError as exc:
        module.fail_json(msg=str(exc).split("\n", 1)[0], errors=exc.errors)
    except PlacementError as exc:
        module.fail_json(msg=str(exc), service=exc.service, constraint=exc.constraint)
    except KBError as exc:
        hint = " (a newer controller decision is stored: fencing token too old)" if exc.status == 409 else ""
        module.fail_json(msg=str(exc) + hint, status=exc.status)
    except (K8sError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # a bug: still a message, never a bare "Module failed"
        module.fail_json(msg=unexpected(exc))
    diff = result.pop("diff", None)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if module._diff and diff is not None:
        result["diff"] = diff
    if failed:
        module.fail_json(**result, msg=result.pop("message"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
