"""Issue 14.3 and the broken markup: what a user reads before installing.

Every module documents its requirements, the README says which ansible-core and Python and where
the packages go, user-facing examples work outside the checkout, and no documentation markup
such as C(...) is cut short by a parenthesis inside it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml
from user_path_support import ROOT

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
PLUGINS = (
    [("modules", m) for m in MODULES]
    + [("inventory", "kb")]
    + [("doc_fragments", p.stem) for p in sorted((ROOT / "plugins" / "doc_fragments").glob("*.py"))]
)
MARKUP = re.compile(r"\b([CVOEIMPLURB]|RV)\(")


def documentation(kind: str, name: str) -> dict:
    mod = importlib.import_module(f"ansible_collections.qonnect.core.plugins.{kind}.{name}")
    text = mod.ModuleDocFragment.DOCUMENTATION if kind == "doc_fragments" else mod.DOCUMENTATION
    return yaml.safe_load(text)


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def markup_parts(text: str):
    """Each markup's content as Ansible's parser reads it: up to the first ')'."""
    for match in MARKUP.finditer(text):
        end = text.find(")", match.end())
        yield match.group(0) + (text[match.end() : end + 1] if end >= 0 else text[match.end() :])


@pytest.mark.parametrize("kind,name", PLUGINS)
def test_markup_is_not_cut_short(kind, name):
    broken = []
    for text in strings(documentation(kind, name)):
        for part in markup_parts(text):
            body = part[part.index("(") + 1 : -1]
            if (
                body.count("{{") != body.count("}}")
                or body.count("'") % 2
                or body.count('"') % 2
                or body.count("[") != body.count("]")
            ):
                broken.append(part)
    assert not broken, f"{kind}/{name}: markup cut short by a ')' inside it: {broken}"


_PREFIX = "ansible_collections.qonnect.core.plugins.module_utils."


def _module_utils_reached(path: Path) -> set[str]:
    """The collection's module_utils a module imports, directly or through other module_utils
    (what AnsiballZ packs), as dotted names below module_utils (e.g. ``k8s.client``)."""
    import ast

    seen: set[str] = set()
    todo = [path]
    while todo:
        for node in ast.walk(ast.parse(todo.pop().read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for full in names:
                if not full.startswith(_PREFIX):
                    continue
                dotted = full[len(_PREFIX) :]
                base = ROOT / "plugins" / "module_utils" / Path(*dotted.split("."))
                source = (
                    base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
                )
                if dotted not in seen and source.is_file():
                    seen.add(dotted)
                    todo.append(source)
    return seen


def test_the_requirement_walk_sees_through_runners():
    modules = ROOT / "plugins" / "modules"
    assert "k8s.client" in _module_utils_reached(modules / "deploy.py")
    assert "k8s.client" in _module_utils_reached(modules / "cluster.py")  # gather_nodes
    assert "k8s.client" not in _module_utils_reached(modules / "placement.py")
    assert "k8s.client" not in _module_utils_reached(modules / "cluster_info.py")


@pytest.mark.parametrize("name", MODULES)
def test_every_module_documents_its_requirements(name):
    requirements = documentation("modules", name).get("requirements") or []
    assert any(r.startswith("python >= 3.10") for r in requirements), requirements
    reached = _module_utils_reached(ROOT / "plugins" / "modules" / f"{name}.py")
    needs = {"kubernetes": "k8s.client" in reached}  # the one module_utils importing kubernetes
    for package, needed in needs.items():
        if needed:
            assert any(r.startswith(package) for r in requirements), (name, package, requirements)


def test_readme_requirements_section():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Requirements", 1)[1].split("\n## ", 1)[0]
    for needle in (
        "ansible-core",
        "2.19",
        ">= 3.10",
        "meta/ee-requirements.txt",
        "pipx inject",
        "the Python that runs Ansible",
    ):
        assert needle in section, needle
    listed = {
        line.split(">")[0].strip().lower()
        for line in (ROOT / "meta" / "ee-requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    for package in listed:
        assert package in section.lower(), package


def test_user_examples_work_outside_the_checkout():
    """The README's 'Use it with your clusters' and the module examples name no checkout-relative
    file (examples/..., ./...): they run from any directory after ansible-galaxy collection install."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it with your clusters", 1)[1].split("\n## ", 1)[0]
    relative = re.compile(r"(?<![\w$/~.-])(examples|playbooks|docs)/\S+")
    # What a user types: code blocks and inline code, less their shell comments. Links and
    # comments that point at the documentation are reading, not running.
    blocks = re.findall(r"```[^\n]*\n(.*?)```", section, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", section, flags=re.S))
    typed = [re.sub(r"(^|\s)#.*$", "", line) for text in blocks + inline for line in text.splitlines()]
    assert typed, "the section shows no commands"
    found = [m.group(0) for line in typed for m in relative.finditer(line)]
    assert not found, found
    for name in MODULES:
        mod = importlib.import_module(f"ansible_collections.qonnect.core.plugins.modules.{name}")
        for task in yaml.safe_load(mod.EXAMPLES) or []:
            args = next((v for k, v in task.items() if k.startswith("qonnect.core.")), None) or {}
            src = args.get("src") if isinstance(args, dict) else None
            if src:
                assert src.startswith(("/", "~", "{{")), f"{name} EXAMPLES: src {src} is relative"
