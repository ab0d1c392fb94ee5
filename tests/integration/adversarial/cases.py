"""The adversarial spec table: each case is a bad spec (files written to a folder) and the paths
its errors must name. Both formats; the same table runs through the CLI and the modules.

A case is refused whole: the expected substrings must all appear in the errors, nothing may be
deployed or stored, and the bomb cases must stay within the documented memory and time bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MIB = 2**20
DEPLOY = """\
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        containers:
        - name: web
          image: nginx
          resources: {requests: {cpu: 100m, memory: 64Mi}}
"""


@dataclass
class Case:
    id: str
    format: str  # native | qonnect
    files: dict[str, bytes]  # file name -> content; the spec is "spec.yml"
    expect: list[str]  # substrings the errors must contain (paths first)
    bundles: dict[str, str] = field(default_factory=dict)  # tier key -> file name
    bomb: bool = False  # checked against the memory and time bounds
    placement: bool = False  # refused by placement (after validation), not by validation
    spec_path: str | None = None  # e.g. /dev/zero instead of the spec file

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            (folder / name).write_bytes(content)
        return Path(self.spec_path) if self.spec_path else folder / "spec.yml"


def native(
    service: str = "",
    top: str = "",
    meta: str = "",
    objective: str = "{energy: 1}",
    manifests: str = DEPLOY,
    name: str = "adv",
) -> str:
    """A qonnect.io/v1 spec with one service; the arguments splice text into it."""
    body = "\n".join("    " + line for line in manifests.rstrip("\n").split("\n"))
    svc = "\n".join("    " + line for line in service.rstrip("\n").split("\n")) if service else ""
    return (
        f"apiVersion: qonnect.io/v1\nkind: Application\n{top}"
        f"metadata:\n  name: {name}\n{meta}"
        f"spec:\n  objective: {objective}\n  services:\n  - name: web\n    tier: cloud\n"
        f"{svc + chr(10) if svc else ''}    manifests:\n{body}\n"
    )


def qonnect(
    meta: str = "",
    qos: str = "    energy: 1.0\n    pricing: 0.0\n    performance: 0.0\n",
    spec: str = "  cloud_svc: cloud.yaml\n",
    top: str = "",
    name: str = "adv",
) -> str:
    """A swarmchestrate.tu-berlin.de/v1 Application; bundles by file name."""
    return (
        f"apiVersion: swarmchestrate.tu-berlin.de/v1\nkind: Application\n{top}"
        f"metadata:\n  name: {name}\n{meta}  qos:\n{qos}" + (f"spec:\n{spec}" if spec else "")
    )


BUNDLE = (
    b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {A: b}\n---\n"
    + DEPLOY.replace("- apiVersion", "apiVersion").replace("\n  ", "\n").encode()
)


def _alias_bomb(indent: str, levels: int = 9) -> str:
    lines = [f"{indent}a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        ref = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"{indent}a{i}: &a{i} [{ref}]")
    return "\n".join(lines) + "\n"


def _selector(body: str) -> str:
    return "constraints: {clusterSelector: " + body


def _n(text: str) -> dict[str, bytes]:
    return {"spec.yml": text.encode()}


def _q(text: str, **bundles: bytes) -> dict[str, bytes]:
    files = {"spec.yml": text.encode(), "cloud.yaml": BUNDLE}
    files.update(bundles)
    return files


def _configmaps(count: int) -> bytes:
    return "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(count)
    ).encode()


def _big_value(size: int) -> bytes:
    return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  v: " + b"x" * size + b"\n"


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


S0 = "spec.services[0]"
M0 = f"{S0}.manifests[0]"
POD = f"{M0}.spec.template.spec"


def native_cases() -> list[Case]:
    c = Case
    return [
        c("dup-tier", "native", _n(native(service="tier: edge")), [f"{S0}.tier: duplicate key"]),
        c(
            "dup-energy",
            "native",
            _n(native(objective="{energy: 1.0, energy: 0.0}")),
            ["spec.objective.energy: duplicate key"],
        ),
        c("dup-name", "native", _n(native(meta="  name: other\n")), ["metadata.name: duplicate key"]),
        c("unknown-top", "native", _n(native(top="extra: 1\n")), ["extra: unknown field"]),
        c(
            "unknown-metadata",
            "native",
            _n(native(meta="  annotations: {a: b}\n")),
            ["metadata.annotations: unknown field"],
        ),
        c(
            "unknown-service-field",
            "native",
            _n(native(service="tierr: edge")),
            [f"{S0}.tierr: unknown field"],
        ),
        c(
            "unknown-spec-field",
            "native",
            _n(native().replace("spec:\n", "spec:\n  policy: x\n", 1)),
            ["spec.policy: unknown field"],
        ),
        c("label-list", "native", _n(native(meta="  labels: {team: [a, b]}\n")), ["metadata.labels.team"]),
        c("label-map", "native", _n(native(meta="  labels: {team: {a: b}}\n")), ["metadata.labels.team"]),
        c("label-number", "native", _n(native(meta="  labels: {version: 1}\n")), ["metadata.labels.version"]),
        c(
            "label-key-invalid",
            "native",
            _n(native(meta="  labels: {'bad key!': x}\n")),
            ["metadata.labels.bad key!"],
        ),
        c(
            "label-value-too-long",
            "native",
            _n(native(meta=f"  labels: {{a: {'x' * 64}}}\n")),
            ["metadata.labels.a"],
        ),
        c("non-utf8", "native", {"spec.yml": native().encode() + b"# \xff\xfe\n"}, ["not UTF-8"]),
        c(
            "container-string",
            "native",
            _n(
                native(
                    manifests=DEPLOY.replace(
                        "        - name: web\n          image: nginx\n          resources: {requests: {cpu: 100m, memory: 64Mi}}\n",
                        "        - hello\n",
                    )
                )
            ),
            [f"{POD}.containers[0]"],
        ),
        c(
            "containers-mapping",
            "native",
            _n(
                native(
                    manifests=DEPLOY.replace(
                        "        containers:\n        - name: web\n          image: nginx\n          resources: {requests: {cpu: 100m, memory: 64Mi}}\n",
                        "        containers: {name: web}\n",
                    )
                )
            ),
            [f"{POD}.containers"],
        ),
        c(
            "deployment-spec-string",
            "native",
            _n(
                native(
                    manifests="- {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}, spec: hello}"
                )
            ),
            [f"{M0}.spec: expected a mapping"],
        ),
        c(
            "template-spec-string",
            "native",
            _n(
                native(
                    manifests="- {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}, "
                    "spec: {template: {spec: x}}}"
                )
            ),
            [f"{POD}: expected a mapping"],
        ),
        c(
            "cronjob-jobtemplate-string",
            "native",
            _n(
                native(
                    manifests="- {apiVersion: batch/v1, kind: CronJob, metadata: {name: d}, "
                    "spec: {jobTemplate: x}}"
                )
            ),
            [f"{M0}.spec.jobTemplate: expected a mapping"],
        ),
        c(
            "resources-list",
            "native",
            _n(
                native(
                    manifests=DEPLOY.replace(
                        "resources: {requests: {cpu: 100m, memory: 64Mi}}", "resources: [cpu]"
                    )
                )
            ),
            [f"{POD}.containers[0].resources"],
        ),
        c(
            "request-not-quantity",
            "native",
            _n(native(manifests=DEPLOY.replace("cpu: 100m", "cpu: lots"))),
            [f"{POD}.containers[0].resources.requests.cpu"],
        ),
        c(
            "request-inf",
            "native",
            _n(native(manifests=DEPLOY.replace("memory: 64Mi", "memory: .inf"))),
            [f"{POD}.containers[0].resources.requests.memory"],
        ),
        c(
            "minfree-inf",
            "native",
            _n(native(service="constraints: {minFree: {memory: .inf}}")),
            [f"{S0}.constraints.minFree.memory"],
        ),
        c(
            "minfree-1e400",
            "native",
            _n(native(service="constraints: {minFree: {cpu: '1e400'}}")),
            [f"{S0}.constraints.minFree.cpu"],
        ),
        c(
            "minfree-negative",
            "native",
            _n(native(service="constraints: {minFree: {cpu: -1}}")),
            [f"{S0}.constraints.minFree.cpu"],
        ),
        c(
            "minfree-unknown",
            "native",
            _n(native(service="constraints: {minFree: {gpu: 1}}")),
            [f"{S0}.constraints.minFree.gpu: unknown field"],
        ),
        c(
            "values-integer",
            "native",
            _n(native(service=_selector("{matchExpressions: [{key: a, operator: In, values: 5}]}}"))),
            [f"{S0}.constraints.clusterSelector.matchExpressions[0].values"],
        ),
        c(
            "values-empty-in",
            "native",
            _n(native(service=_selector("{matchExpressions: [{key: a, operator: In, values: []}]}}"))),
            [f"{S0}.constraints.clusterSelector.matchExpressions[0].values"],
        ),
        c(
            "values-with-exists",
            "native",
            _n(native(service=_selector("{matchExpressions: [{key: a, operator: Exists, values: [x]}]}}"))),
            [f"{S0}.constraints.clusterSelector.matchExpressions[0].values"],
        ),
        c(
            "operator-bogus",
            "native",
            _n(native(service=_selector("{matchExpressions: [{key: a, operator: Near}]}}"))),
            [f"{S0}.constraints.clusterSelector.matchExpressions[0].operator"],
        ),
        c(
            "selector-key-invalid",
            "native",
            _n(native(service=_selector("{matchExpressions: [{key: 'a b', operator: Exists}]}}"))),
            [f"{S0}.constraints.clusterSelector.matchExpressions[0].key"],
        ),
        c(
            "matchlabels-key-invalid",
            "native",
            _n(native(service=_selector("{matchLabels: {'-bad-': x}}}"))),
            [f"{S0}.constraints.clusterSelector.matchLabels.-bad-"],
        ),
        c(
            "matchlabels-value-list",
            "native",
            _n(native(service=_selector("{matchLabels: {region: [eu]}}}"))),
            [f"{S0}.constraints.clusterSelector.matchLabels.region"],
        ),
        c(
            "selector-unknown-field",
            "native",
            _n(native(service="constraints: {clusterSelector: {near: x}}")),
            [f"{S0}.constraints.clusterSelector.near: unknown field"],
        ),
        c(
            "latency-nan",
            "native",
            _n(native(service="constraints: {maxLatency: [{from: edge-1, ms: .nan}]}")),
            [f"{S0}.constraints.maxLatency[0].ms"],
        ),
        c(
            "latency-inf",
            "native",
            _n(native(service="constraints: {maxLatency: [{from: edge-1, ms: .inf}]}")),
            [f"{S0}.constraints.maxLatency[0].ms"],
        ),
        c(
            "latency-negative",
            "native",
            _n(native(service="constraints: {maxLatency: [{from: edge-1, ms: -5}]}")),
            [f"{S0}.constraints.maxLatency[0].ms"],
        ),
        c(
            "latency-no-from",
            "native",
            _n(native(service="constraints: {maxLatency: [{ms: 5}]}")),
            [f"{S0}.constraints.maxLatency[0].from"],
        ),
        c(
            "filter-syntax",
            "native",
            _n(native(service="constraints: {filter: 'free.cpu >>'}")),
            [f"{S0}.constraints.filter"],
        ),
        c(
            "filter-not-string",
            "native",
            _n(native(service="constraints: {filter: 123}")),
            [f"{S0}.constraints.filter"],
        ),
        c(
            "filter-raises",
            "native",
            _n(native(service="constraints: {filter: 'abs(name) > `1`'}")),
            ["filter 'abs(name) > `1`'", "raised", "abs()"],
            placement=True,
        ),
        c(
            "replicas-huge",
            "native",
            _n(native(service="replicas: 1000000000")),
            [f"{S0}.replicas: 1000000000 is more than the limit"],
            bomb=True,
        ),
        c("replicas-string", "native", _n(native(service="replicas: '3'")), [f"{S0}.replicas"]),
        c("replicas-negative", "native", _n(native(service="replicas: -1")), [f"{S0}.replicas"]),
        c("replicas-bool", "native", _n(native(service="replicas: true")), [f"{S0}.replicas"]),
        c("spread-over-replicas", "native", _n(native(service="replicas: 1\nspread: 2")), [f"{S0}.spread"]),
        c(
            "tier-bogus",
            "native",
            _n(native(service="tier: moon").replace("    tier: cloud\n", "", 1)),
            [f"{S0}.tier"],
        ),
        c(
            "tier-list",
            "native",
            _n(native(service="tier: [cloud]").replace("    tier: cloud\n", "", 1)),
            [f"{S0}.tier"],
        ),
        c("weight-over-one", "native", _n(native(objective="{energy: 2}")), ["spec.objective.energy"]),
        c("weight-nan", "native", _n(native(objective="{energy: .nan}")), ["spec.objective.energy"]),
        c("weight-string", "native", _n(native(objective="{energy: high}")), ["spec.objective.energy"]),
        c(
            "objective-unknown",
            "native",
            _n(native(objective="{speed: 1}")),
            ["spec.objective.speed: unknown field"],
        ),
        c("depends-unknown", "native", _n(native(service="dependsOn: [db]")), [f"{S0}.dependsOn"]),
        c("depends-self", "native", _n(native(service="dependsOn: [web]")), [f"{S0}.dependsOn"]),
        c(
            "services-empty",
            "native",
            _n(native().split("  services:", maxsplit=1)[0] + "  services: []\n"),
            ["spec.services"],
        ),
        c(
            "services-mapping",
            "native",
            _n(native().split("  services:", maxsplit=1)[0] + "  services: {web: 1}\n"),
            ["spec.services"],
        ),
        c(
            "services-too-many",
            "native",
            _n(
                native().split("  services:", maxsplit=1)[0]
                + "  services:\n"
                + "".join(
                    f"  - {{name: s{i}, manifests: [{{apiVersion: v1, kind: ConfigMap, metadata: {{name: c}}}}]}}\n"
                    for i in range(101)
                )
            ),
            ["spec.services: 101 services are more than the limit"],
        ),
        c(
            "duplicate-service",
            "native",
            _n(
                native()
                + "  - name: web\n    manifests:\n"
                + "\n".join("    " + line for line in DEPLOY.rstrip().split("\n"))
                + "\n"
            ),
            ["spec.services[1].name"],
        ),
        c(
            "manifests-missing",
            "native",
            _n(native().split("    manifests:", maxsplit=1)[0]),
            [f"{S0}.manifests: is required"],
        ),
        c(
            "manifest-no-kind",
            "native",
            _n(native(manifests="- {apiVersion: v1, metadata: {name: x}}")),
            [f"{M0}.kind"],
        ),
        c(
            "manifest-no-name",
            "native",
            _n(native(manifests="- {apiVersion: v1, kind: ConfigMap}")),
            [f"{M0}.metadata.name"],
        ),
        c("manifest-string", "native", _n(native(manifests="- just text")), [M0]),
        c(
            "manifest-label-list",
            "native",
            _n(
                native(manifests="- {apiVersion: v1, kind: ConfigMap, metadata: {name: x, labels: {a: [1]}}}")
            ),
            [f"{M0}.metadata.labels.a"],
        ),
        c("name-uppercase", "native", _n(native(name="Adv")), ["metadata.name"]),
        c("namespace-invalid", "native", _n(native(meta="  namespace: 'a_b'\n")), ["metadata.namespace"]),
        c(
            "apiversion-wrong",
            "native",
            _n(native().replace("qonnect.io/v1", "qonnect.io/v2")),
            ["apiVersion: 'qonnect.io/v2'"],
        ),
        c("kind-wrong", "native", _n(native().replace("kind: Application", "kind: App", 1)), ["kind:"]),
        c("document-list", "native", _n("- a\n- b\n"), ["spec.yml: expected a mapping"]),
        c("yaml-syntax", "native", _n(native() + "  - name: [\n"), ["spec.yml:", "YAML syntax error"]),
        c("two-documents", "native", _n(native() + "---\n" + native()), ["expected one YAML document"]),
        c("empty-file", "native", _n(""), ["spec.yml: expected a mapping"]),
        c("recursive-alias", "native", _n(native(meta="  labels: &l {a: *l}\n")), ["recursive alias"]),
        c(
            "nested-20000",
            "native",
            _n(native(top=f"x: {_nested(20000)}\n")),
            ["spec.yml:", "nest"],
            bomb=True,
        ),
        c(
            "nested-100",
            "native",
            _n(native(top=f"x: {_nested(100)}\n")),
            ["spec.yml:", "deeper than the limit of 64"],
        ),
        c(
            "alias-bomb-labels",
            "native",
            _n(native(meta="  labels:\n" + _alias_bomb("    "))),
            ["metadata.labels.a", "alias bomb"],
            bomb=True,
        ),
        c(
            "manifest-file-missing",
            "native",
            _n(native(manifests="- file: nowhere.yaml")),
            [f"{M0}.file: cannot read manifest file 'nowhere.yaml'"],
        ),
        c(
            "manifest-file-dev-zero",
            "native",
            _n(native(manifests="- file: /dev/zero")),
            [f"{M0}.file", "larger than the limit"],
            bomb=True,
        ),
        c(
            "spec-dev-zero",
            "native",
            {},
            ["/dev/zero", "larger than the limit"],
            bomb=True,
            spec_path="/dev/zero",
        ),
        c(
            "manifest-file-dup-key",
            "native",
            {
                "spec.yml": native(manifests="- file: m.yaml").encode(),
                "m.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, name: b}\n",
            },
            [f"{M0}.file[document 1].metadata.name: duplicate key"],
        ),
        c(
            "manifest-file-non-utf8",
            "native",
            {
                "spec.yml": native(manifests="- file: m.yaml").encode(),
                "m.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \xe9}\n",
            },
            [f"{M0}.file", "not UTF-8"],
        ),
        c(
            "configmaps-50000",
            "native",
            {"spec.yml": native(manifests="- file: many.yaml").encode(), "many.yaml": _configmaps(50000)},
            [f"{S0}.manifests", "limit"],
            bomb=True,
        ),
        c(
            "configmaps-300",
            "native",
            {
                "spec.yml": native(manifests="- file: a.yaml\n- file: b.yaml").encode(),
                "a.yaml": _configmaps(150),
                "b.yaml": _configmaps(150),
            },
            [f"{S0}.manifests: more than the limit of 250 objects"],
        ),
        c(
            "configmap-value-50mib",
            "native",
            {"spec.yml": native(manifests="- file: big.yaml").encode(), "big.yaml": _big_value(50 * MIB)},
            [f"{M0}.file", "larger than the limit"],
            bomb=True,
        ),
        c(
            "configmap-value-2mib",
            "native",
            {"spec.yml": native(manifests="- file: big.yaml").encode(), "big.yaml": _big_value(2 * MIB)},
            [f"{M0}.file[document 1].data", "limit of 1048576 bytes"],
        ),
        c(
            "all-at-once",
            "native",
            _n(
                native(
                    service="tier: edge\nreplicas: 0\nconstraints: {maxLatency: [{from: x, ms: .nan}]}",
                    objective="{energy: 3}",
                    meta="  labels: {a: [1]}\n",
                    name="Bad",
                )
            ),
            [
                f"{S0}.tier: duplicate key",
                f"{S0}.replicas",
                f"{S0}.constraints.maxLatency[0].ms",
                "spec.objective.energy",
                "metadata.labels.a",
                "metadata.name",
            ],
        ),
        c(
            "bundles-with-native",
            "native",
            {"spec.yml": native().encode(), "cloud.yaml": BUNDLE},
            ["bundles: tier bundles are only for QONNECT's format"],
            bundles={"cloud_svc": "cloud.yaml"},
        ),
    ]


def qonnect_cases() -> list[Case]:
    c = Case
    return [
        c(
            "q-unknown-bundle",
            "qonnect",
            _q(qonnect(spec="  cloud_svc: cloud.yaml\n  mist_svc: cloud.yaml\n")),
            ["spec.mist_svc: unknown field"],
        ),
        c(
            "q-unknown-top-bundle",
            "qonnect",
            _q(qonnect(top="mist_svc: cloud.yaml\n")),
            ["mist_svc: unknown field"],
        ),
        c(
            "q-metadata-extra",
            "qonnect",
            _q(qonnect(meta="  annotations: {a: b}\n")),
            ["metadata.annotations: unknown field"],
        ),
        c("q-top-extra", "qonnect", _q(qonnect(top="owner: me\n")), ["owner: unknown field"]),
        c(
            "q-dup-energy",
            "qonnect",
            _q(qonnect(qos="    energy: 1.0\n    energy: 0.0\n")),
            ["metadata.qos.energy: duplicate key"],
        ),
        c(
            "q-dup-bundle",
            "qonnect",
            _q(qonnect(spec="  cloud_svc: cloud.yaml\n  cloud_svc: cloud.yaml\n")),
            ["spec.cloud_svc: duplicate key"],
        ),
        c(
            "q-label-list",
            "qonnect",
            _q(qonnect(meta="  labels:\n    user-labels-1-key: [a]\n")),
            ["metadata.labels.user-labels-1-key"],
        ),
        c("q-label-map", "qonnect", _q(qonnect(meta="  labels:\n    k: {a: b}\n")), ["metadata.labels.k"]),
        c("q-qos-missing", "qonnect", _q(qonnect(qos="")), ["metadata.qos"]),
        c("q-qos-over-one", "qonnect", _q(qonnect(qos="    energy: 1.5\n")), ["metadata.qos.energy"]),
        c("q-qos-nan", "qonnect", _q(qonnect(qos="    pricing: .nan\n")), ["metadata.qos.pricing"]),
        c(
            "q-qos-unknown",
            "qonnect",
            _q(qonnect(qos="    energy: 1\n    latency: 1\n")),
            ["metadata.qos.latency: unknown field"],
        ),
        c("q-bundle-integer", "qonnect", _q(qonnect(spec="  cloud_svc: 5\n")), ["spec.cloud_svc"]),
        c(
            "q-bundle-missing-file",
            "qonnect",
            _q(qonnect(spec="  cloud_svc: nowhere.yaml\n")),
            ["spec.cloud_svc: cannot read manifest file 'nowhere.yaml'"],
        ),
        c(
            "q-bundle-non-utf8",
            "qonnect",
            _q(qonnect(), **{"cloud.yaml": BUNDLE + b"# \xff\n"}),
            ["spec.cloud_svc", "not UTF-8"],
        ),
        c(
            "q-bundle-dev-zero",
            "qonnect",
            _q(qonnect(spec="  cloud_svc: {file: /dev/zero}\n")),
            ["spec.cloud_svc", "larger than the limit"],
            bomb=True,
        ),
        c(
            "q-bundle-container-string",
            "qonnect",
            _q(
                qonnect(),
                **{
                    "cloud.yaml": BUNDLE.replace(
                        b"- name: web\n        image: nginx\n        resources: {requests: {cpu: 100m, memory: 64Mi}}\n",
                        b"- hello\n",
                    )
                },
            ),
            ["spec.cloud_svc[document 2].spec.template.spec.containers[0]"],
        ),
        c(
            "q-bundle-spec-string",
            "qonnect",
            _q(
                qonnect(),
                **{
                    "cloud.yaml": b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: hello\n"
                },
            ),
            ["spec.cloud_svc[document 1].spec: expected a mapping"],
        ),
        c(
            "q-bundle-dup-key",
            "qonnect",
            _q(
                qonnect(),
                **{
                    "cloud.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {A: b, A: c}\n"
                },
            ),
            ["spec.cloud_svc[document 1].data.A: duplicate key"],
        ),
        c(
            "q-bundle-50000",
            "qonnect",
            _q(qonnect(), **{"cloud.yaml": _configmaps(50000)}),
            ["spec.cloud_svc", "limit"],
            bomb=True,
        ),
        c(
            "q-bundle-value-50mib",
            "qonnect",
            _q(qonnect(), **{"cloud.yaml": _big_value(50 * MIB)}),
            ["spec.cloud_svc", "larger than the limit"],
            bomb=True,
        ),
        c("q-no-bundles", "qonnect", _q(qonnect(spec="")), ["spec: expected at least one of cloud_svc"]),
        c(
            "q-bundle-given-twice",
            "qonnect",
            _q(qonnect()),
            ["bundles.cloud_svc: given twice"],
            bundles={"cloud_svc": "cloud.yaml"},
        ),
        c(
            "q-bundle-unknown-key",
            "qonnect",
            _q(qonnect(spec="")),
            ["bundles.mist_svc: unknown tier bundle"],
            bundles={"cloud_svc": "cloud.yaml", "mist_svc": "cloud.yaml"},
        ),
        c(
            "q-bundle-option-missing-file",
            "qonnect",
            _q(qonnect(spec="")),
            ["bundles.edge_svc: cannot read manifest file"],
            bundles={"edge_svc": "nowhere.yaml"},
        ),
        c(
            "q-alias-bomb",
            "qonnect",
            _q(qonnect(meta="  labels:\n" + _alias_bomb("    "))),
            ["metadata.labels.a", "alias bomb"],
            bomb=True,
        ),
        c(
            "q-nested-20000",
            "qonnect",
            _q(qonnect(top=f"x: {_nested(20000)}\n")),
            ["spec.yml:", "nest"],
            bomb=True,
        ),
        c(
            "q-kind-wrong",
            "qonnect",
            _q(qonnect().replace("kind: Application", "kind: Deployment")),
            ["kind:"],
        ),
        c("q-name-invalid", "qonnect", _q(qonnect(name="Istio_Sample")), ["metadata.name"]),
        c(
            "q-all-at-once",
            "qonnect",
            _q(
                qonnect(
                    spec="  cloud_svc: cloud.yaml\n  mist_svc: x\n",
                    qos="    energy: 2\n",
                    meta="  labels: {a: [1]}\n  x: 1\n",
                )
            ),
            ["spec.mist_svc", "metadata.qos.energy", "metadata.labels.a", "metadata.x"],
        ),
    ]


def all_cases() -> list[Case]:
    return native_cases() + qonnect_cases()
