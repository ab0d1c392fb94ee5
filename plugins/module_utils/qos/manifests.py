# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading and checking the Kubernetes manifests of a service (inline, by file, or YAML text).

A manifest entry is an inline manifest, ``{file: PATH}`` (every document of a YAML file),
``{kustomize: DIR}`` (what ``kubectl kustomize DIR`` renders, as kubernetes.core's kustomize
lookup does) or ``{helm: CHART_DIR, release, values, valuesFiles}`` (what ``helm template``
renders of a local chart); the last three may pick documents with ``select: [{kind, name}, ...]``
and/or ``selector: {matchLabels: {...}}``, so one upstream multi-document release file (or
chart) can be split over several services (and tiers) unchanged.

A chart (a directory or a packaged ``.tgz``, as ``helm pull`` gives it) is rendered for the
clusters it may be placed on (``kube_versions.render_target``: the lowest Kubernetes version and
the common API group-versions of the inventory's clusters its ``kubeVersion`` admits, passed as
``--kube-version``/``--api-versions``); its ``kubeVersion`` becomes a constraint of the service
(the placement filter ``KubeVersion``), so a cluster it refuses is ineligible instead of failing
the render.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from typing import Any, Union

from ansible_collections.qonnect.core.plugins.module_utils import kube_versions, spec_yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import SpecChecker, typename
from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import (
    MAX_OBJECT_DATA_BYTES,
    MAX_OBJECTS_PER_SERVICE,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import Application, Service
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import (
    POD_TEMPLATE_KINDS,
    finite_quantity,
    pod_path,
)
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    SpecYamlError,
)

# The keys of a manifest entry that refers to documents instead of being one.
SOURCE_KEYS = ("file", "kustomize", "helm")
PICK_KEYS = ("select", "selector")
HELM_KEYS = ("release", "values", "valuesFiles")
KUSTOMIZE_TIMEOUT = 60.0
HELM_TIMEOUT = 60.0
CHART_ARCHIVES = (".tgz", ".tar.gz")
MAX_CHART_YAML_BYTES = 1 << 20

# The inventory's cluster entries a chart is rendered for (``kube_version``, ``api_versions``),
# or a callable giving them (asked only when a spec has a chart), or None: Helm's defaults.
Clusters = Union[list, Callable[[], list], None]  # noqa: UP007 (a runtime alias: Union, as the sanity pylint wants)


def tool_path(name: str) -> str | None:
    """A tool (kubectl, helm) on PATH, else beside the running Python (a virtualenv's bin)."""
    found = shutil.which(name)
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.access(beside, os.X_OK) else None


def kubectl_path() -> str | None:
    """kubectl on PATH, else beside the running Python (a virtualenv's bin)."""
    return tool_path("kubectl")


def helm_path() -> str | None:
    """helm on PATH, else beside the running Python (a virtualenv's bin)."""
    return tool_path("helm")


# Top-level keys that make a mapping an (inline) manifest, even an incomplete one.
MANIFEST_KEYS = ("apiVersion", "kind", "metadata")


def is_reference(entry: Any) -> bool:
    """A {file: ...}, {kustomize: ...} or {helm: ...} entry (not an inline manifest)."""
    return isinstance(entry, dict) and "apiVersion" not in entry and any(k in entry for k in SOURCE_KEYS)


def is_unknown_entry(entry: Any) -> bool:
    """A mapping that is neither a manifest nor a reference ({fiel: x}, {chart: x}, {select: ...}):
    reported by its keys, not as a manifest lacking apiVersion."""
    return isinstance(entry, dict) and not is_reference(entry) and not any(k in entry for k in MANIFEST_KEYS)


class ManifestReader(SpecChecker):
    """The manifest checks both formats share; bytes read count towards the spec's total limit."""

    def __init__(self, base_dir: str, clusters: Clusters = None):
        super().__init__()
        self.base_dir = base_dir  # manifest files are relative to the spec's folder
        self.clusters = clusters
        # kubeVersion constraints of the service being read: its own, then its charts'
        self.kube_constraints: list[str] = []
        self.bytes_read = 0
        self.namespaces_checked: set[str] = set()  # paths check_namespaces saw (each once)
        # The application's name and namespace, once its metadata is read: a Helm chart is
        # rendered as release <name> in <namespace>, as `helm install NAME -n NAMESPACE` would.
        self.app_name: str | None = None
        self.app_namespace: str | None = None

    def metadata(self, data: dict, allowed: tuple[str, ...]) -> tuple[str, str, dict, dict]:
        """The application's metadata (both formats read it before any manifest), kept for
        rendering Helm charts."""
        name, namespace, labels, meta = super().metadata(data, allowed)
        self.app_name, self.app_namespace = name or None, namespace or None
        return name, namespace, labels, meta

    def read_manifest_file(self, rel: Any, path: str) -> list[dict]:
        if not isinstance(rel, str) or not rel:
            self.err(path, f"{rel!r} is not a file path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        budget = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - self.bytes_read)
        try:
            text = spec_yaml.read_bounded(full, budget, what="manifest file")
        except SpecYamlError as exc:
            if exc.detail.startswith("cannot read"):
                self.err(path, f"cannot read manifest file {rel!r}: {exc.detail.split(': ', 1)[-1]}")
            elif budget < MAX_FILE_BYTES and "larger than the limit" in exc.detail:
                self.err(
                    path,
                    f"{rel!r}: the files of this spec together are larger than the "
                    f"limit of {MAX_TOTAL_BYTES // 2**20} MiB",
                )
            else:
                self.err(path, f"{rel!r}: {exc.detail}")
            return []
        self.bytes_read += len(text)
        return self.parse_manifest_text(text, path, source=full)

    def parse_manifest_text(self, text: str, path: str, source: str) -> list[dict]:
        try:
            docs, duplicates = spec_yaml.load(text, source, path=path, multi=True)
        except SpecYamlError as exc:
            self.errors.extend(f"{path}: {e}" for e in exc.errors)
            return []
        self.errors.extend(duplicates)
        out: list[dict] = []
        for i, doc in enumerate(d for d in docs if d is not None):
            out.extend(self.expand_list(doc, f"{path}[document {i + 1}]"))
        return out

    def expand_list(self, doc: Any, path: str) -> list[dict]:
        """A manifest, or a Kubernetes ``List`` of them, becomes a flat list."""
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            return [
                m for i, item in enumerate(doc["items"]) for m in self.expand_list(item, f"{path}.items[{i}]")
            ]
        return [doc] if self.check_manifest(doc, path) else []

    def check_manifest(self, doc: Any, path: str) -> bool:
        if not isinstance(doc, dict):
            self.err(path, f"expected a Kubernetes manifest (a mapping), got {typename(doc)}")
            return False
        ok = True
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str) or not doc.get(key):
                self.err(f"{path}.{key}", "is required (a non-empty string)")
                ok = False
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            self.err(f"{path}.metadata.name", "is required (a non-empty string)")
            ok = False
        elif meta.get("labels") is not None:
            before = len(self.errors)
            self.labels(meta.get("labels"), f"{path}.metadata.labels")
            ok = ok and len(self.errors) == before
        if not self.shaped(doc.get("spec"), dict, f"{path}.spec"):
            return False
        if doc.get("kind") in ("ConfigMap", "Secret"):
            ok = self.check_data(doc, path) and ok
        return self.check_pod(doc, path) and ok

    def check_data(self, doc: dict, path: str) -> bool:
        """A ConfigMap's or Secret's data stays under Kubernetes' 1 MiB."""
        size = 0
        for key in ("data", "binaryData", "stringData"):
            data = doc.get(key)
            if not self.shaped(data, dict, f"{path}.{key}"):
                return False
            for name, value in (data or {}).items():
                if not isinstance(value, str):
                    self.err(f"{path}.{key}.{name}", f"{typename(value)} is not a string (quote it)")
                    return False
                size += len(str(name)) + len(value)
        if size > MAX_OBJECT_DATA_BYTES:
            self.err(
                f"{path}.data",
                f"{doc['kind']} data of {size} bytes is more than the "
                f"limit of {MAX_OBJECT_DATA_BYTES} bytes (1 MiB)",
            )
            return False
        return True

    def check_pod(self, doc: dict, path: str) -> bool:
        """Each step towards the pod's containers is the right type; quantities are valid."""
        kind = doc.get("kind")
        if kind not in POD_TEMPLATE_KINDS and kind not in ("Pod", "CronJob"):
            return True
        node: Any = doc
        where = path
        for step in pod_path(kind).split("."):
            node = node.get(step) if isinstance(node, dict) else None
            where = f"{where}.{step}"
            if node is None:
                return True
            if not self.shaped(node, dict, where):
                return False
        ok = True
        for key in ("containers", "initContainers"):
            containers = node.get(key)
            if not self.shaped(containers, list, f"{where}.{key}"):
                ok = False
                continue
            for ci, container in enumerate(containers or []):
                ok = self.check_container(container, f"{where}.{key}[{ci}]") and ok
        return ok

    def check_container(self, container: Any, path: str) -> bool:
        """A container is a mapping; its resources' requests and limits are quantities."""
        if not isinstance(container, dict):  # null too: a container is required here
            self.err(path, f"expected a container (a mapping), got {typename(container)}")
            return False
        res = container.get("resources")
        if not self.shaped(res, dict, f"{path}.resources"):
            return False
        ok = True
        for rkind in ("requests", "limits"):
            values = (res or {}).get(rkind)
            if not self.shaped(values, dict, f"{path}.resources.{rkind}"):
                ok = False
                continue
            for rname, raw in (values or {}).items():
                try:
                    finite_quantity(raw)
                except ValueError:
                    self.err(
                        f"{path}.resources.{rkind}.{rname}",
                        f"{raw!r} is not a Kubernetes quantity (e.g. 250m, 128Mi)",
                    )
                    ok = False
        return ok

    def render_kustomize(self, rel: Any, path: str) -> list[dict]:
        """The documents ``kubectl kustomize DIR`` renders (DIR relative to the spec's folder)."""
        if not isinstance(rel, str) or not rel:
            self.err(path, f"{rel!r} is not a directory path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        if not os.path.isdir(full):
            self.err(path, f"{rel!r} is not a directory (a Kustomize directory with kustomization.yaml)")
            return []
        kubectl = kubectl_path()
        if kubectl is None:
            self.err(path, "kubectl is needed to render a Kustomize directory and was not found on PATH")
            return []
        return self.rendered([kubectl, "kustomize", full], "kubectl kustomize", rel, full, path)

    def rendered(self, argv: list[str], what: str, rel: str, full: str, path: str) -> list[dict]:
        """The documents a renderer (kubectl kustomize, helm template) prints, or an error naming
        the path and the renderer's last line of output."""
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=HELM_TIMEOUT if what == "helm template" else KUSTOMIZE_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.err(path, f"{what} {rel!r} failed: {exc}")
            return []
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            # helm's cause is its "Error: ..." line (a hint about --debug follows it)
            errors = [line[len("Error: ") :] for line in lines if line.startswith("Error: ")]
            detail = errors[-1] if errors else lines[-1] if lines else f"exit {done.returncode}"
            self.err(path, f"{what} {rel!r} failed: {detail}")
            return []
        budget = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - self.bytes_read)
        if len(done.stdout) > budget:
            self.err(path, f"{rel!r}: what {what} renders is larger than the limit")
            return []
        self.bytes_read += len(done.stdout)
        return self.parse_manifest_text(done.stdout, path, source=full)

    def render_helm(self, entry: dict, path: str) -> list[dict]:
        """The documents ``helm template RELEASE CHART_DIR`` renders (CHART_DIR and valuesFiles
        relative to the spec's folder; ``values`` is given last, so it wins, as with helm -f)."""
        rel = entry.get("helm")
        hpath = f"{path}.helm"
        if not isinstance(rel, str) or not rel:
            self.err(hpath, f"{rel!r} is not a directory path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        archive = full.endswith(CHART_ARCHIVES) and os.path.isfile(full)
        if not archive and not os.path.isfile(os.path.join(full, "Chart.yaml")):
            self.err(
                hpath,
                f"{rel!r} is not a chart directory (a directory with Chart.yaml) or a chart archive (.tgz)",
            )
            return []
        kube_constraint = self.chart_kube_version(full, archive, rel, hpath)
        if kube_constraint is False:
            return []
        release = entry.get("release", self.app_name or "release")
        if not isinstance(release, str) or not release:
            self.err(f"{path}.release", f"{release!r} is not a release name")
            return []
        files = entry.get("valuesFiles", [])
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            self.err(f"{path}.valuesFiles", "expected a list of values file paths")
            return []
        values = entry.get("values")
        if values is not None and not isinstance(values, dict):
            self.err(f"{path}.values", f"expected a mapping of chart values, got {typename(values)}")
            return []
        argv = [release, full, "--skip-tests", *self.capabilities()]
        if self.app_namespace:
            argv += ["--namespace", self.app_namespace]
        for i, name in enumerate(files):
            fpath = name if os.path.isabs(name) else os.path.join(self.base_dir, name)
            if not os.path.isfile(fpath):
                self.err(f"{path}.valuesFiles[{i}]", f"cannot read values file {name!r}")
                return []
            argv += ["--values", fpath]
        helm = helm_path()
        if helm is None:
            self.err(hpath, f"helm is needed to render the chart {rel!r} and was not found on PATH")
            return []
        with tempfile.TemporaryDirectory(prefix="qonnect-helm-") as scratch:
            if values:
                inline = os.path.join(scratch, "values.json")  # JSON is YAML to helm
                with open(inline, "w", encoding="utf-8") as out:
                    # a YAML date or timestamp (since: 2024-01-01) goes as the string helm reads
                    out.write(json.dumps(values, default=str))
                argv += ["--values", inline]
            return self.rendered([helm, "template", *argv], "helm template", rel, full, hpath)

    def chart_kube_version(self, full: str, archive: bool, rel: str, path: str) -> str | bool | None:
        """The chart's ``kubeVersion`` (None when it has none; False, with an error, when Helm
        would refuse it), recorded as a constraint of the service."""
        try:
            if archive:
                with tarfile.open(full, "r:gz") as tar:
                    member = next(
                        (
                            m
                            for m in tar
                            if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")
                        ),
                        None,
                    )
                    raw = tar.extractfile(member) if member and member.size <= MAX_CHART_YAML_BYTES else None
                    text = raw.read().decode("utf-8") if raw else ""
            else:
                with open(os.path.join(full, "Chart.yaml"), encoding="utf-8") as fh:
                    text = fh.read(MAX_CHART_YAML_BYTES)
            docs = spec_yaml.load(text, rel)[0]
        except (OSError, tarfile.TarError, UnicodeError, SpecYamlError):
            return None  # helm itself names what is wrong with the chart
        meta = docs[0] if docs and isinstance(docs[0], dict) else {}
        constraint = meta.get("kubeVersion")
        if constraint in (None, ""):
            return None
        try:
            kube_versions.parse_constraint(constraint)
        except kube_versions.ConstraintError as exc:
            self.err(path, f"{rel!r}: Chart.yaml kubeVersion {constraint!r} is not a valid constraint: {exc}")
            return False
        if constraint not in self.kube_constraints:
            self.kube_constraints.append(constraint)
        return str(constraint)

    def inventory_clusters(self) -> list:
        """The clusters charts are rendered for (asked once, when the first chart needs them)."""
        if callable(self.clusters):
            self.clusters = self.clusters()
        return self.clusters if isinstance(self.clusters, list) else []

    def capabilities(self) -> list[str]:
        """``--kube-version``/``--api-versions`` for the clusters the service may go to: the
        lowest version and the common group-versions of those the service's (and its charts')
        kubeVersion admit (kube_versions.render_target); none known: Helm's defaults."""
        version, apis = kube_versions.render_target(self.inventory_clusters(), self.kube_constraints)
        argv = ["--kube-version", version] if version else []
        return argv + (["--api-versions", ",".join(apis)] if apis else [])

    def reference(self, entry: dict, path: str) -> list[dict]:
        """The documents of a {file|kustomize|helm: ..., select, selector} entry; unknown keys
        are errors."""
        sources = [k for k in SOURCE_KEYS if k in entry]
        if len(sources) > 1:
            self.err(path, f"give one of file, kustomize or helm, not {' and '.join(sources)}")
            return []
        source = sources[0]
        self.mapping(entry, path, (source, *PICK_KEYS, *(HELM_KEYS if source == "helm" else ())))
        if source == "file":
            docs = self.read_manifest_file(entry["file"], f"{path}.file")
        elif source == "kustomize":
            docs = self.render_kustomize(entry["kustomize"], f"{path}.kustomize")
        else:
            docs = self.render_helm(entry, path)
        return self.pick(docs, entry.get("select"), entry.get("selector"), path)

    def unknown_entry(self, entry: dict, path: str) -> None:
        """Name every key of an entry that is neither a manifest nor a file/kustomize/helm reference."""
        if not entry:
            self.err(path, "an empty mapping is neither a manifest nor a {file: PATH} entry")
            return
        picks = [k for k in PICK_KEYS if k in entry]
        for key in sorted((k for k in entry if k not in PICK_KEYS), key=str):
            self.err(
                f"{path}.{key}",
                "unknown field; a manifest entry is an inline manifest (apiVersion, kind, metadata) "
                "or one of file, kustomize or helm, with select or selector",
            )
        if picks:
            self.err(path, f"{' and '.join(picks)} needs file, kustomize or helm beside it")

    def pick(self, docs: list[dict], select: Any, selector: Any, path: str) -> list[dict]:
        """The documents matching any {kind, name} of ``select`` and ``selector``'s labels."""
        wanted: list[tuple[Any, Any]] = []
        if select is not None:
            if not isinstance(select, list) or not select:
                self.err(f"{path}.select", "expected a non-empty list of {kind, name}")
                return []
            for i, item in enumerate(select):
                item = self.mapping(item, f"{path}.select[{i}]", ("kind", "name"))
                kind, name = item.get("kind"), item.get("name")
                for key, val in (("kind", kind), ("name", name)):
                    if not isinstance(val, str) or not val:
                        self.err(f"{path}.select[{i}].{key}", "is required (a non-empty string)")
                wanted.append((kind, name))
        sel = self.mapping(selector, f"{path}.selector", ("matchLabels",))
        labels = self.labels(sel.get("matchLabels"), f"{path}.selector.matchLabels") if sel else {}
        if selector is not None and not labels:
            self.err(f"{path}.selector.matchLabels", "expected a non-empty mapping of labels")

        def meta(doc: dict) -> dict:
            return doc.get("metadata") or {}

        out = [
            d
            for d in docs
            if (not wanted or (d.get("kind"), meta(d).get("name")) in wanted)
            and all((meta(d).get("labels") or {}).get(k) == v for k, v in labels.items())
        ]
        found = {(d.get("kind"), meta(d).get("name")) for d in docs}
        for i, (kind, name) in enumerate(wanted):
            if docs and isinstance(kind, str) and isinstance(name, str) and (kind, name) not in found:
                self.err(f"{path}.select[{i}]", f"no {kind} named {name!r} in the documents")
        if docs and (wanted or labels) and not out:
            self.err(path, "selects none of the documents")
        return out

    def finish(
        self, name: str, namespace: str, labels: dict, objective: dict, services: list, **extra: Any
    ) -> Application:
        """The application, after the namespace check of every service's manifests: done here,
        where every format ends, so no format can skip it (docs/qos-spec.md)."""
        for i, svc in enumerate(services):
            path = self.manifests_path(i, svc)
            if path not in self.namespaces_checked:
                self.check_namespaces(svc.manifests, namespace, path)
        return super().finish(name, namespace, labels, objective, services, **extra)

    def manifests_path(self, index: int, service: Service) -> str:
        """Where the spec gives a service's manifests, for error paths (native format)."""
        return f"spec.services[{index}].manifests"

    def check_namespaces(self, manifests: list[dict], namespace: str, path: str) -> None:
        """A Namespace manifest must be the application's namespace, and a manifest's own
        metadata.namespace the application's: never silently rewritten (docs/qos-spec.md)."""
        self.namespaces_checked.add(path)
        for doc in manifests:
            meta = doc.get("metadata") or {}
            name, kind = meta.get("name"), doc.get("kind")
            if kind == "Namespace" and name != namespace:
                self.err(
                    f"{path}[Namespace {name}]",
                    f"a Namespace in the manifests must be the application's namespace {namespace!r}",
                )
            elif kind != "Namespace" and meta.get("namespace") not in (None, "", namespace):
                self.err(
                    f"{path}[{kind} {name}].metadata.namespace",
                    f"{meta['namespace']!r} differs from the application's namespace {namespace!r} "
                    "(remove it, or set the application's metadata.namespace)",
                )

    def manifests(self, value: Any, path: str) -> list[dict]:
        if value is None:
            self.err(path, "is required (a list of manifests or {file: PATH} entries)")
            return []
        if not isinstance(value, list) or not value:
            self.err(path, "expected a non-empty list of manifests or {file: PATH} entries")
            return []
        out: list[dict] = []
        for i, entry in enumerate(value):
            p = f"{path}[{i}]"
            if is_reference(entry):
                out.extend(self.reference(entry, p))
            elif is_unknown_entry(entry):
                self.unknown_entry(entry, p)
            else:
                out.extend(self.expand_list(entry, p))
            if len(out) > MAX_OBJECTS_PER_SERVICE:
                break
        return self.bounded(out, path)

    def bounded(self, objects: list[dict], path: str) -> list[dict]:
        if len(objects) > MAX_OBJECTS_PER_SERVICE:
            self.err(path, f"more than the limit of {MAX_OBJECTS_PER_SERVICE} objects in one service")
            return objects[:MAX_OBJECTS_PER_SERVICE]
        return objects
