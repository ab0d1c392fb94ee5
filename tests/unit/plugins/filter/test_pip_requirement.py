"""The pip requirement the qonnect_package role installs (issue 24 audit).

The role used to append ``[extra]`` to the spec, so the documented ``qonnect==0.1.0`` became
``qonnect==0.1.0[controller]`` and a wheel's path or URL ``/srv/x.whl[controller]``, which pip
refuses. The ``qonnect.core.pip_requirement`` filter puts the extra after the name or makes a
PEP 508 direct reference; these tests check the filter and what the role's tasks hand to pip.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.qonnect.core.plugins.filter import pip_requirement as plugin
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[4]
ROLE_TASKS = ROOT / "roles" / "qonnect_package" / "tasks" / "main.yml"
WHEEL = "qonnect-0.1.0-py3-none-any.whl"

# spec -> what the role installs with the controller extra
FORMS = {
    "qonnect": "qonnect[controller]",
    "qonnect==0.1.0": "qonnect[controller]==0.1.0",
    "qonnect>=0.1,<0.2": "qonnect[controller]<0.2,>=0.1",
    "qonnect~=0.1": "qonnect[controller]~=0.1",
    " qonnect==0.1.0 ": "qonnect[controller]==0.1.0",
    "qonnect[kb]==0.1.0": "qonnect[controller,kb]==0.1.0",
    "qonnect[controller]==0.1.0": "qonnect[controller]==0.1.0",
    'qonnect==0.1.0; python_version >= "3.10"': 'qonnect[controller]==0.1.0; python_version >= "3.10"',
    f"/srv/wheels/{WHEEL}": f"qonnect[controller] @ file:///srv/wheels/{WHEEL}",
    "/srv/qonnect-0.1.0.tar.gz": "qonnect[controller] @ file:///srv/qonnect-0.1.0.tar.gz",
    "/opt/qonnect/src/services": "qonnect[controller] @ file:///opt/qonnect/src/services",
    "/opt/qonnect/src/services/": "qonnect[controller] @ file:///opt/qonnect/src/services",
    f"/srv/my wheels/{WHEEL}": f"qonnect[controller] @ file:///srv/my%20wheels/{WHEEL}",
    f"file:///srv/wheels/{WHEEL}": f"qonnect[controller] @ file:///srv/wheels/{WHEEL}",
    f"https://pypi.example.org/packages/{WHEEL}": f"qonnect[controller] @ https://pypi.example.org/packages/{WHEEL}",
    "git+https://git.example.org/qonnect.git@v0.1.0#subdirectory=services": (
        "qonnect[controller] @ git+https://git.example.org/qonnect.git@v0.1.0#subdirectory=services"
    ),
    f"qonnect @ https://pypi.example.org/packages/{WHEEL}": (
        f"qonnect[controller] @ https://pypi.example.org/packages/{WHEEL}"
    ),
}

INVALID = {
    "": "empty",
    "   ": "empty",
    "qonnect==": "",
    "qonnect 0.1.0": "",
    "qonnect==0.1.0[controller]": "",
    "services/": "absolute",
    "./dist/" + WHEEL: "absolute",
    "~/wheels/" + WHEEL: "absolute",
    WHEEL: "absolute",
    f"/srv/wheels/{WHEEL}[controller]": "extra",
    "qonnect>=0.1,,<0.2": "",
    "qonnect==0.1.0 ; ": "",
}


def _same(left: str, right: str) -> None:
    """Equal as requirements (packaging orders specifiers and extras its own way)."""
    a, b = Requirement(left), Requirement(right)
    assert (a.name, a.extras, a.specifier, a.url, a.marker) == (
        b.name,
        b.extras,
        b.specifier,
        b.url,
        b.marker,
    )


@pytest.fixture(params=[True, False], ids=["packaging", "without-packaging"])
def packaging_or_not(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(plugin, "HAS_PACKAGING", request.param)
    return bool(request.param)


@pytest.mark.parametrize(("spec", "expected"), FORMS.items(), ids=list(FORMS))
def test_every_documented_form_gets_the_extra_in_the_right_place(
    spec: str, expected: str, packaging_or_not: bool
) -> None:
    result = plugin.pip_requirement(spec, "controller")
    if packaging_or_not:
        assert result == expected
    _same(result, expected)
    requirement = Requirement(result)
    assert requirement.name == "qonnect"
    assert "controller" in requirement.extras


@pytest.mark.parametrize("spec", ["services", "qonnect"])
def test_a_name_is_a_distribution_name(spec: str) -> None:
    # a bare word is a name on the index, never a directory; "services" is a valid (other) name
    assert plugin.pip_requirement(spec, "kb") == f"{spec}[kb]"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("kb", "qonnect[kb]==0.1.0"),
        ("kb,agent", "qonnect[agent,kb]==0.1.0"),
        (["all"], "qonnect[all]==0.1.0"),
        ("", "qonnect==0.1.0"),
        (None, "qonnect==0.1.0"),
        ([], "qonnect==0.1.0"),
    ],
)
def test_extras(extra: Any, expected: str, packaging_or_not: bool) -> None:
    assert plugin.pip_requirement("qonnect==0.1.0", extra) == expected


def test_a_path_or_url_is_installed_under_the_given_name() -> None:
    assert plugin.pip_requirement(f"/srv/{WHEEL}", "kb", name="qonnect-fork") == (
        f"qonnect-fork[kb] @ file:///srv/{WHEEL}"
    )


@pytest.mark.parametrize(("spec", "reason"), INVALID.items(), ids=[repr(s) for s in INVALID])
def test_an_invalid_spec_fails_naming_the_variable(spec: str, reason: str, packaging_or_not: bool) -> None:
    with pytest.raises(AnsibleFilterError) as caught:
        plugin.pip_requirement(spec, "controller", variable="controller_package")
    message = str(caught.value)
    assert message.startswith(f"controller_package: {spec!r} is not a pip requirement"), message
    assert reason in message
    assert "qonnect==0.1.0" in message  # names the forms that work
    assert "\n" not in message


@pytest.mark.parametrize("spec", [None, 3, ["qonnect"]])
def test_a_spec_that_is_not_a_string_fails(spec: Any) -> None:
    with pytest.raises(AnsibleFilterError, match=r"^knowledge_base_package: .* \(not a string\)"):
        plugin.pip_requirement(spec, "kb", variable="knowledge_base_package")


@pytest.mark.parametrize("extra", ["con troller", "[kb]", 3, [3]])
def test_an_invalid_extra_fails(extra: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="resource_agent_package"):
        plugin.pip_requirement("qonnect", extra, variable="resource_agent_package")


def test_the_filter_is_registered() -> None:
    assert plugin.FilterModule().filters() == {"pip_requirement": plugin.pip_requirement}


def test_the_documentation_is_yaml_and_its_examples_are_true() -> None:
    doc = yaml.safe_load(plugin.DOCUMENTATION)
    assert doc["name"] == "pip_requirement"
    assert set(doc["options"]) == {"_input", "extra", "name", "variable"}
    assert "_value" in yaml.safe_load(plugin.RETURN)
    examples = yaml.safe_load(plugin.EXAMPLES)
    assert examples
    shown = re.findall(
        r"'([^']+)' \| qonnect\.core\.pip_requirement\('(\w+)'\) }}\"\s+# (.+)", plugin.EXAMPLES
    )
    assert len(shown) == 2
    for spec, extra, expected in shown:
        assert plugin.pip_requirement(spec, extra) == expected.strip()


# What the role hands to ansible.builtin.pip, rendered from its tasks file.


def _render(template: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["qonnect.core.pip_requirement"] = plugin.pip_requirement
    return env.from_string(template.strip()).render(**variables)


def role_pip_name(spec: str, extra: str = "controller", spec_var: str = "controller_package") -> str:
    """The O(name) of the role's pip task for these role variables, through its set_fact tasks."""
    tasks = yaml.safe_load(ROLE_TASKS.read_text())
    variables: dict[str, Any] = {
        "qonnect_package_spec": spec,
        "qonnect_package_extra": extra,
        "qonnect_package_spec_var": spec_var,
        "qonnect_package_src_dir": "/opt/qonnect/src",
    }
    for task in tasks:
        facts = task.get("ansible.builtin.set_fact", {})
        if "_qonnect_package_requirement" in facts:
            variables["_qonnect_package_requirement"] = _render(
                facts["_qonnect_package_requirement"], variables
            )
    (pip,) = [task["ansible.builtin.pip"] for task in tasks if "ansible.builtin.pip" in task]
    return _render(pip["name"], variables)


@pytest.mark.parametrize(("spec", "expected"), FORMS.items(), ids=list(FORMS))
def test_the_role_installs_every_documented_form(spec: str, expected: str) -> None:
    result = role_pip_name(spec)
    assert result == expected
    Requirement(result)  # what pip parses; "qonnect==0.1.0[controller]" is refused here


def test_the_role_installs_the_shipped_sources_by_default() -> None:
    assert role_pip_name("", extra="kb") == "qonnect[kb] @ file:///opt/qonnect/src/services"


def test_the_role_fails_on_an_invalid_spec_naming_the_variable() -> None:
    with pytest.raises(
        AnsibleFilterError, match=r"^controller_package: 'services/' is not a pip requirement"
    ):
        role_pip_name("services/")


def test_the_role_validates_before_it_copies_anything() -> None:
    tasks = yaml.safe_load(ROLE_TASKS.read_text())
    assert "_qonnect_package_requirement" in tasks[0]["ansible.builtin.set_fact"]
    assert "when" not in tasks[0]


@pytest.mark.parametrize(
    ("role", "extra"), [("controller", "controller"), ("knowledge_base", "kb"), ("resource_agent", "agent")]
)
def test_the_service_roles_name_their_variable(role: str, extra: str) -> None:
    (include,) = yaml.safe_load((ROOT / "roles" / role / "tasks" / "install.yml").read_text())[:1]
    role_vars = include["vars"]
    assert role_vars["qonnect_package_extra"] == extra
    assert role_vars["qonnect_package_spec"] == f"{{{{ {role}_package }}}}"
    assert role_vars["qonnect_package_spec_var"] == f"{role}_package"
    assert role_vars["qonnect_package_index_url"] == f"{{{{ {role}_package_index }}}}"
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    for name in (f"{role}_package", f"{role}_package_index"):
        assert name in defaults and name in options
        assert options[name]["type"] == "str"
    assert defaults[f"{role}_package"] == options[f"{role}_package"]["default"] == ""
    assert defaults[f"{role}_package_index"] == "{{ qonnect_package_index | default('') }}"
    described = " ".join(options[f"{role}_package"]["description"])
    assert f"qonnect[{extra}]==0.1.0" in described and "qonnect>=0.1,<0.2" in described


def test_the_internal_role_documents_what_its_defaults_hold() -> None:
    role = ROOT / "roles" / "qonnect_package"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
