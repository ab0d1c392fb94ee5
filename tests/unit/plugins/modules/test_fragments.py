"""Argument specs and the documentation that describes them agree.

Each shared argument spec (module_utils/args_common.py) has its doc fragment, and each module's
argument spec equals the options its DOCUMENTATION and fragments declare (name, type, default,
choices, elements, aliases, required), so a user reads what the module accepts.
"""

from __future__ import annotations

import importlib

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils import args_common
from ansible_collections.qonnect.core.plugins.module_utils import module as runner

PAIRS = {
    "kb": args_common.KB_ARGSPEC,
    "plan": args_common.PLAN_ARGSPEC,
    "k8s_auth": args_common.K8S_AUTH_ARGSPEC,
}
MODULES = ("application", "cluster", "cluster_info", "deploy", "placement")
KEYS = ("type", "default", "choices", "elements", "aliases", "required")


def fragment_options(name: str) -> dict:
    fragment = importlib.import_module(f"ansible_collections.qonnect.core.plugins.doc_fragments.{name}")
    return yaml.safe_load(fragment.ModuleDocFragment.DOCUMENTATION)["options"]


def comparable(options: dict) -> dict:
    """Each option's KEYS as the argument spec means them (the doc's str default is 'str')."""
    out = {}
    for name, opts in options.items():
        row = {k: opts.get(k) for k in KEYS}
        row["type"] = row["type"] or "str"
        row["required"] = bool(row["required"])
        row["aliases"] = sorted(row["aliases"] or [])
        if row["choices"] is not None:
            row["choices"] = list(row["choices"])
        out[name] = row
    return out


@pytest.mark.parametrize("fragment", PAIRS)
def test_each_shared_argspec_matches_its_fragment(fragment):
    assert comparable(fragment_options(fragment)) == comparable(PAIRS[fragment])


class Captured(Exception):
    pass


def module_argspec(monkeypatch, name: str) -> dict:
    """The argument spec a module hands to AnsibleModule (captured before it parses anything)."""

    def capture(argument_spec, **_kwargs):
        raise Captured(argument_spec)

    monkeypatch.setattr(runner, "AnsibleModule", capture)
    module = importlib.import_module(f"ansible_collections.qonnect.core.plugins.modules.{name}")
    with pytest.raises(Captured) as caught:
        module.main()
    return caught.value.args[0]


def documented_options(name: str) -> dict:
    module = importlib.import_module(f"ansible_collections.qonnect.core.plugins.modules.{name}")
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        options.update(fragment_options(fragment.rsplit(".", 1)[-1]))
    return options


@pytest.mark.parametrize("name", MODULES)
def test_module_argspec_is_what_its_documentation_says(monkeypatch, name):
    spec = module_argspec(monkeypatch, name)
    for opts in spec.values():  # suboptions are checked by ansible-test sanity
        opts.pop("options", None)
    assert comparable(documented_options(name)) == comparable(spec)


@pytest.mark.parametrize("fragment", ["plan", "k8s_auth"])
def test_modules_taking_a_shared_spec_extend_its_fragment(monkeypatch, fragment):
    for name in MODULES:
        spec = module_argspec(monkeypatch, name)
        takes = set(PAIRS[fragment]) <= set(spec)
        module = importlib.import_module(f"ansible_collections.qonnect.core.plugins.modules.{name}")
        extends = f"qonnect.core.{fragment}" in yaml.safe_load(module.DOCUMENTATION).get(
            "extends_documentation_fragment", []
        )
        assert takes == extends, name
