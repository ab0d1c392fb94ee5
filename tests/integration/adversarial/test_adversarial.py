"""Issue 13 end to end: every bad spec is refused whole, every deploy is all-or-nothing, and
QONNECT's own application runs from its files.

One federation (paper testbed, KB, nine agents) for the whole module. The table of bad specs
(cases.py, both formats) runs through the CLI (``qonnect plan``) and through the deploy module
run as Ansible runs it; after each module case every cluster and the KB are compared with the
state before the table. Then: discovery before any write, roll-back of a failed first deploy,
removal by label (idempotent, also for a gone application), a spec stored only once it places,
per-object diffs in check mode, and QONNECT's sample application deployed from its files.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from adversarial_harness import (
    CLUSTERS,
    ROOT,
    SAMPLE,
    cluster_state,
    kb_state,
    labelled,
    run_cli,
    run_module,
)
from cases import DEPLOY, Case, all_cases, native
from support import wait_for

pytestmark = pytest.mark.timeout(900)

CASES = all_cases()
PAPER = str(ROOT / "examples" / "inventories" / "paper.json")
EVALUATION = str(ROOT / "examples" / "inventories" / "qonnect-evaluation.json")
MAX_RSS_MB = 200  # the documented worst case (docs/qos-spec.md, benchmarks/spec_limits.py)
MAX_CPU_S = 2.0
WORKERS = 2  # processes at once: the machine has two cores
BUNDLE_FILES = {"cloud_svc": "productpage.yaml", "fog_svc": "review-details.yaml", "edge_svc": "ratings.yaml"}


def test_table_is_large_and_covers_both_formats():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    assert sum(c.format == "qonnect" for c in CASES) >= 25
    assert sum(c.bomb for c in CASES) >= 10


def _bounded(case: Case, run) -> None:
    if case.bomb:
        assert run.rss_mb < MAX_RSS_MB, f"{case.id}: {run.rss_mb:.0f} MB"
        assert run.cpu_s < MAX_CPU_S, f"{case.id}: {run.cpu_s:.2f} s CPU"


def _no_traceback(run) -> None:
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout, run.stderr[-2000:]


def _run_all(run_one, items: list) -> list:
    """Run every case's process, two at a time (each is measured on its own, see run_measured)."""
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(run_one, items))


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict:
    """Case id -> `qonnect plan` on the case's files."""
    base = tmp_path_factory.mktemp("cli")

    def one(case: Case):
        folder = base / case.id
        args = ["plan", "--spec", str(case.write(folder)), "--inventory", PAPER, "--scorer", "borda"]
        for key, name in case.bundles.items():
            args += ["--bundle", f"{key}={name}"]
        return run_cli(*args, cwd=str(folder))

    return dict(zip([c.id for c in CASES], _run_all(one, CASES), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_refuses_with_paths(case, cli_runs):
    run = cli_runs[case.id]
    _no_traceback(run)
    assert run.rc == 2, (run.rc, run.stdout[-500:], run.stderr[-2000:])
    for expected in case.expect:
        assert expected in run.stderr, (expected, run.stderr[-3000:])
    _bounded(case, run)


@pytest.fixture(scope="module")
def baseline(federation, dyn):
    """Cluster and KB state before the table (the module cases must leave both as they are)."""
    kb = federation.kb()
    return cluster_state(dyn), kb_state(kb)


def kb_args(federation) -> dict:
    return {"kb_url": federation.kb_url, "kb_token": federation.admin_token_file.read_text().strip()}


def _module_run(federation, module: str, case: Case, folder: Path, **extra):
    args = {"src": str(case.write(folder / "case")), **extra, **kb_args(federation)}
    if case.bundles:
        args["bundles"] = {k: str(folder / "case" / v) for k, v in case.bundles.items()}
    return run_module(module, args, folder)


@pytest.fixture(scope="module")
def module_runs(tmp_path_factory, federation, dyn, baseline) -> tuple[dict, tuple]:
    """Case id -> the deploy module on the case's files; and the cluster and KB state after all."""
    base = tmp_path_factory.mktemp("module")
    runs = _run_all(
        lambda c: _module_run(federation, "deploy", c, base / c.id, scorer="borda", wait_timeout=5), CASES
    )
    return dict(zip([c.id for c in CASES], runs, strict=True)), (
        cluster_state(dyn),
        kb_state(federation.kb()),
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_module_refuses_whole(case, module_runs, baseline):
    runs, after = module_runs
    run = runs[case.id]
    _no_traceback(run)
    assert run.rc == 1, (run.stdout[-2000:], run.stderr[-2000:])
    out = run.json()
    assert out["failed"] and out["msg"] and not out["msg"].startswith("Module failed")
    text = out["msg"] + "\n" + "\n".join(out.get("errors") or [])
    for expected in case.expect:
        assert expected in text, (expected, text[-3000:])
    if not case.placement:
        assert out["msg"].startswith("invalid QoS spec")
    _bounded(case, run)
    # every case must leave every cluster and the KB as they were
    assert after[0] == baseline[0]
    assert after[1] == baseline[1]


BOMBS = [c for c in CASES if c.bomb]
OTHER_MODULES = [(m, c) for m in ("application", "placement") for c in BOMBS]


@pytest.fixture(scope="module")
def other_module_runs(tmp_path_factory, federation) -> dict:
    base = tmp_path_factory.mktemp("other-modules")
    runs = _run_all(
        lambda mc: _module_run(federation, mc[0], mc[1], base / f"{mc[0]}-{mc[1].id}"), OTHER_MODULES
    )
    return dict(zip([(m, c.id) for m, c in OTHER_MODULES], runs, strict=True))


@pytest.mark.parametrize(("module", "case"), OTHER_MODULES, ids=[f"{m}-{c.id}" for m, c in OTHER_MODULES])
def test_other_modules_stay_bounded(module, case, other_module_runs):
    run = other_module_runs[(module, case.id)]
    _no_traceback(run)
    out = run.json()
    assert run.rc == 1 and out["msg"].startswith("invalid QoS spec"), out
    for expected in case.expect:
        assert expected in out["msg"] + "\n".join(out.get("errors") or [])
    _bounded(case, run)


PLAYBOOK_CASES = [c for c in CASES if c.id in ("dup-tier", "q-unknown-bundle", "alias-bomb-labels")]


@pytest.mark.parametrize("case", PLAYBOOK_CASES, ids=[c.id for c in PLAYBOOK_CASES])
def test_playbook_names_the_path(case, tmp_path, federation, dyn, baseline):
    spec = case.write(tmp_path)
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec}")
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    # ansible-core prefixes the msg with "Module failed:", or "Action failed:" when the deploy ran
    # in the controller's process (its action plugin); the msg must name the path
    assert re.search(r"(Module|Action) failed: invalid QoS spec \(\d+ errors?\): \S", output), output[-3000:]
    for expected in case.expect:
        assert expected in output, (expected, output[-3000:])
    assert cluster_state(dyn) == baseline[0]
    assert kb_state(federation.kb()) == baseline[1]


# -- all-or-nothing deploys --------------------------------------------------------------------


def nothing_left(dyn, application: str, timeout: float = 60) -> None:
    """Nothing labelled with the application on any cluster (namespaces are deleted
    asynchronously, as on a real cluster, so this waits for them to go)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {c: sorted(objs) for c, objs in labelled(dyn, application).items() if objs}
        if not left:
            return
        assert time.monotonic() < deadline, f"still labelled with {application}: {left}"
        time.sleep(0.5)


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_unserved_kind_is_refused_before_any_cluster_is_touched(tmp_path, federation, dyn):
    before = cluster_state(dyn)
    manifests = DEPLOY + "- {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}}\n"
    spec = _write(tmp_path, "spec.yml", native(manifests=manifests, name="unserved"))
    out = run_module("deploy", {"src": str(spec), "wait_timeout": 5, **kb_args(federation)}, tmp_path).json()
    assert out["failed"] and "does not serve example.com/v1 Widget" in out["msg"]
    assert cluster_state(dyn) == before  # not even the namespace


def _never_ready(name: str) -> str:
    stuck = DEPLOY.replace(
        "      spec:\n        containers:",
        "      spec:\n        nodeSelector: {no-such-label: x}\n        containers:",
    )
    return native(manifests=stuck + "- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n", name=name)


def test_failed_first_deploy_is_rolled_back_then_removal_is_idempotent(tmp_path, federation, dyn):
    """The orphan test: a failed first deploy, then remove, then nothing labelled anywhere."""
    spec = _write(tmp_path, "spec.yml", _never_ready("orphan"))
    out = run_module("deploy", {"src": str(spec), "wait_timeout": 4, **kb_args(federation)}, tmp_path).json()
    assert out["failed"] and "not ready" in out["msg"], out["msg"]
    assert out["rolled_back"], out
    nothing_left(dyn, "orphan")
    kb = federation.kb()
    assert (kb.get_placement("orphan").get("desired") or {}) == {}
    # an object left behind by an interrupted run, on a cluster no placement names, in the
    # application's namespace (removal sweeps only what <namespace>/<app> owns)
    namespaces = dyn("edge-3").resources.get(api_version="v1", kind="Namespace")
    if not any(n.metadata.name == "orphan" for n in dyn("edge-3").get(namespaces).items):
        dyn("edge-3").create(
            namespaces, body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "orphan"}}
        )
    core = dyn("edge-3").resources.get(api_version="v1", kind="ConfigMap")
    dyn("edge-3").create(
        core,
        namespace="orphan",
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "left-behind",
                "labels": {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/application": "orphan"},
                "annotations": {"qonnect.io/owner": "orphan/orphan"},
            },
        },
    )
    first = federation.playbook("qonnect.core.remove", "-e", "app=orphan")
    assert first.returncode == 0, first.stdout[-3000:]
    nothing_left(dyn, "orphan")
    again = federation.playbook("qonnect.core.remove", "-e", "app=orphan")
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"localhost\s+:.*changed=0", again.stdout), again.stdout[-2000:]
    gone = run_module("deploy", {"name": "orphan", "state": "absent", **kb_args(federation)}, tmp_path).json()
    assert not gone.get("failed") and gone["changed"] is False, gone


def test_failed_replacement_keeps_the_previous_placement(tmp_path, federation, dyn):
    spec = _write(tmp_path, "spec.yml", native(name="keep"))
    first = run_module(
        "deploy", {"src": str(spec), "wait_timeout": 60, **kb_args(federation)}, tmp_path
    ).json()
    assert not first.get("failed"), first
    home = first["plan"]["services"]["web"][0]["cluster"]
    stuck = _write(tmp_path / "v2", "spec.yml", _never_ready("keep"))
    out = run_module(
        "deploy", {"src": str(stuck), "exclude": [home], "wait_timeout": 4, **kb_args(federation)}, tmp_path
    ).json()
    assert out["failed"] and "previous placement keeps serving" in out["msg"]
    wait_for(
        lambda: {c for c, objs in labelled(dyn, "keep").items() if objs} == {home},
        60,
        "the cluster the failed re-placement was adding to be clean again",
    )
    assert federation.kb().get_placement("keep")["current"]["web"][0]["cluster"] == home
    run_module("deploy", {"name": "keep", "state": "absent", **kb_args(federation)}, tmp_path)
    nothing_left(dyn, "keep")


def test_unplaceable_spec_is_not_stored(tmp_path, federation, dyn):
    kb = federation.kb()
    spec = _write(tmp_path, "spec.yml", native(name="placeable"))
    first = run_module("deploy", {"src": str(spec), **kb_args(federation)}, tmp_path).json()
    assert not first.get("failed") and first["version"] == 1, first
    impossible = _write(
        tmp_path / "v2",
        "spec.yml",
        native(name="placeable", service="constraints: {maxLatency: [{from: edge-1, ms: 0.001}]}"),
    )
    before = kb_state(kb)
    out = run_module("deploy", {"src": str(impossible), **kb_args(federation)}, tmp_path).json()
    assert out["failed"] and "maxLatency" in out["msg"]
    assert kb.get_application("placeable")["version"] == 1
    assert kb_state(kb) == before
    run_module("deploy", {"name": "placeable", "state": "absent", **kb_args(federation)}, tmp_path)


def test_check_mode_diff_is_per_object(tmp_path, federation, dyn):
    """Issue 14.6: one diff per object, headed '<cluster>: <Kind ns/name>'; 'would deploy'."""
    spec = _write(tmp_path, "spec.yml", native(name="diffs"))
    first = run_module("deploy", {"src": str(spec), **kb_args(federation)}, tmp_path).json()
    assert not first.get("failed"), first
    home = first["plan"]["services"]["web"][0]["cluster"]
    before = cluster_state(dyn)
    out = run_module(
        "deploy",
        {
            "name": "diffs",
            "exclude": [home],
            "_ansible_check_mode": True,
            "_ansible_diff": True,
            **kb_args(federation),
        },
        tmp_path,
    ).json()
    assert out["changed"] and out["message"].startswith("would deploy to ")
    assert cluster_state(dyn) == before
    diffs = out["diff"]
    assert isinstance(diffs, list) and diffs
    for diff in diffs:
        assert diff["before_header"] == diff["after_header"]
        assert re.fullmatch(r"[a-z]+-\d: [A-Za-z]+ ([a-z0-9-]+/)?[a-z0-9.-]+", diff["after_header"])
    headers = {d["after_header"]: d for d in diffs}
    target = out["plan"]["services"]["web"][0]["cluster"]
    created = headers[f"{target}: Deployment diffs/web"]
    assert created["before"] == {}
    # server dry-run: the server's defaults are in the created object, not shown as removed
    assert created["after"]["spec"].get("strategy"), created["after"]["spec"]
    assert f"{home}: Deployment diffs/web" in headers  # removed from the old cluster
    assert headers[f"{home}: Deployment diffs/web"]["after"] == {}
    run_module("deploy", {"name": "diffs", "state": "absent", **kb_args(federation)}, tmp_path)


# -- QONNECT's own application -----------------------------------------------------------------


def _bundles() -> dict[str, str]:
    return {key: str(SAMPLE / name) for key, name in BUNDLE_FILES.items()}


def test_qonnect_sample_plans_from_its_files():
    args = ["plan", "--spec", "application.yaml", "--inventory", EVALUATION, "--scorer", "borda", "--json"]
    for key, name in BUNDLE_FILES.items():
        args += ["--bundle", f"{key}={name}"]
    run = run_cli(*args, cwd=str(SAMPLE))
    assert run.rc == 0, run.stderr
    plan = run.json()
    assert plan["application"] == "istio-sample"
    assert {s: [e["cluster"] for e in es] for s, es in plan["services"].items()} == {
        "cloud-svc": ["cloud-energy"],
        "fog-svc": ["fog-energy"],
        "edge-svc": ["edge-energy"],
    }
    rows = plan["explanation"]["cloud-svc"]
    ranked = [r for r in rows if r.get("total_all_nodes") is not None]
    assert [r["cluster"] for r in ranked] == ["cloud-energy", "cloud-cost", "cloud-performance"]


def test_qonnect_sample_deploys_with_addresses_resolved(tmp_path, federation, dyn):
    """Through the deploy playbook, as a user runs it, with QONNECT's files as they are."""
    result = federation.playbook(
        "qonnect.core.deploy",
        "-e",
        f"app_file={SAMPLE / 'application.yaml'}",
        "-e",
        json.dumps({"bundles": _bundles(), "scorer": "borda", "wait_timeout": 90}),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    placed = federation.kb().get_placement("istio-sample")["current"]
    chosen = {s: es[0]["cluster"] for s, es in placed.items()}
    applied = {c: sorted(labelled(dyn, "istio-sample")[c]) for c in chosen.values()}
    assert set(chosen) == {"cloud-svc", "fog-svc", "edge-svc"}
    address = {c: federation.clusters[c]["address"] for c in CLUSTERS}
    cloud, fog, edge = chosen["cloud-svc"], chosen["fog-svc"], chosen["edge-svc"]

    def configmap(cluster: str) -> dict:
        res = dyn(cluster).resources.get(api_version="v1", kind="ConfigMap")
        found = dyn(cluster).get(res, namespace="istio-sample").to_dict()["items"]
        named = [c for c in found if c["metadata"]["name"] == "istio-sample"]
        assert named, (cluster, [c["metadata"]["name"] for c in found], applied.get(cluster))
        return named[0]["data"]

    assert configmap(cloud)["DETAILS_HOSTNAME"] == address[fog]
    assert configmap(cloud)["REVIEWS_HOSTNAME"] == address[fog]
    assert configmap(fog)["RATINGS_HOSTNAME"] == address[edge]
    assert not any("CLUSTER_IP]" in json.dumps(configmap(c)) for c in (cloud, fog))  # edge has none
    # Bookinfo across tiers: each cluster reaches the others' Services by address stubs
    svc = {c: dyn(c).resources.get(api_version="v1", kind="Service") for c in (cloud, fog, edge)}
    runs = {"productpage": cloud, "details": fog, "reviews": fog, "ratings": edge}
    for name, host in runs.items():
        for cluster in (cloud, fog, edge):
            obj = dyn(cluster).get(svc[cluster], name=name, namespace="istio-sample").to_dict()
            if cluster == host:
                assert obj["spec"].get("type") != "ExternalName"
            else:
                assert obj["spec"]["externalName"] == f"{name}.istio-sample.svc.{host}.qonnect.local"
    ing = dyn(fog).resources.get(api_version="networking.k8s.io/v1", kind="Ingress")
    assert dyn(fog).get(ing, name="istio-sample", namespace="istio-sample").metadata.name
    stored = federation.kb().get_application("istio-sample")
    assert stored["application"]["source_format"] == "swarmchestrate.tu-berlin.de/v1"
    removed = federation.playbook("qonnect.core.remove", "-e", "app=istio-sample")
    assert removed.returncode == 0, removed.stdout[-3000:]
    nothing_left(dyn, "istio-sample")


def test_qonnect_bundle_keeps_its_own_replicas(tmp_path, federation, dyn):
    docs = list(yaml.safe_load_all((SAMPLE / "ratings.yaml").read_text()))
    for doc in docs:
        if doc and doc.get("kind") == "Deployment":
            doc["spec"]["replicas"] = 2
    edge = _write(tmp_path, "edge.yaml", yaml.safe_dump_all([d for d in docs if d]))
    app = _write(
        tmp_path,
        "application.yaml",
        (SAMPLE / "application.yaml").read_text().replace("name: istio-sample", "name: two-ratings"),
    )
    out = run_module(
        "deploy",
        {
            "src": str(app),
            "bundles": {"edge_svc": str(edge)},
            "scorer": "borda",
            "wait_timeout": 90,
            **kb_args(federation),
        },
        tmp_path,
    ).json()
    assert not out.get("failed"), out.get("msg")
    cluster = out["plan"]["services"]["edge-svc"][0]["cluster"]
    dep = dyn(cluster).resources.get(api_version="apps/v1", kind="Deployment")
    assert dyn(cluster).get(dep, name="ratings-v1", namespace="two-ratings").spec.replicas == 2
    run_module("deploy", {"name": "two-ratings", "state": "absent", **kb_args(federation)}, tmp_path)
