"""The generated list of served resources: of the pinned build, and validated like the others."""

from __future__ import annotations

from qonnect_testbed.apiserver.schema import kind_definition
from qonnect_testbed.kube.binaries import KUBE_VERSION
from qonnect_testbed.store.resources import OMITTED, RESOURCES, served_document


def test_the_file_is_of_the_pinned_kubernetes_build():
    """Bumping kube/go.mod means regenerating it (scripts/generate-served.py)."""
    assert served_document()["gitVersion"] == KUBE_VERSION


def test_every_served_kind_has_the_real_servers_schema():
    """kubernetes-validate's schema of each kind is the one the real server documents it by."""
    doc = served_document()
    real = {(r["group"], r["version"], r["plural"]): r["schema"] for r in doc["resources"]}
    ours = {k: kind_definition(KUBE_VERSION, rt.group, rt.version, rt.kind) for k, rt in RESOURCES.items()}
    assert {k: v for k, v in ours.items() if not v} == {}
    assert {
        k: v
        for k, v in ours.items()
        if v != real[(RESOURCES[k].group, RESOURCES[k].version, RESOURCES[k].plural)]
    } == {}


def test_the_emulator_serves_all_but_the_documented_omissions():
    doc = served_document()
    preferred = {(r["group"], r["plural"]) for r in doc["resources"] if r["preferred"]}
    assert {(rt.group, rt.plural) for rt in RESOURCES.values()} == preferred - set(OMITTED)
    assert len(RESOURCES) >= 57
