# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The pip requirement the qonnect_package role installs: a package spec with its extra."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

try:
    from packaging.requirements import InvalidRequirement, Requirement

    HAS_PACKAGING = True
except ImportError:  # pragma: no cover - ansible-core depends on packaging
    HAS_PACKAGING = False

DOCUMENTATION = r"""
name: pip_requirement
short_description: A pip requirement for a package spec, with extras in the right place
version_added: 0.1.0
description:
  - Turns a package spec as the C(*_package) variables of the knowledge_base, resource_agent and
    controller roles take it into one PEP 508 requirement with the given extras, which
    M(ansible.builtin.pip) installs.
  - A name or a name with a version specifier gets the extras after the name
    (C(qonnect==0.1.0) becomes C(qonnect[controller]==0.1.0)); extras already in the spec are kept.
  - An absolute path to a wheel, an sdist or a source directory (on the host pip runs on) becomes a
    direct reference to its C(file://) URL (C(qonnect[controller] @ file:///srv/qonnect-0.1.0-py3-none-any.whl)),
    a URL a direct reference to it (C(qonnect[controller] @ https://example.org/qonnect-0.1.0-py3-none-any.whl)).
    A direct reference (C(qonnect @ https://...)) is taken as it is.
  - The requirement is validated with C(packaging.requirements.Requirement) (a dependency of ansible-core);
    an invalid spec fails with a message naming O(variable).
positional: extra
options:
  _input:
    description: The package spec.
    type: str
    required: true
  extra:
    description: The extras to add (one, a comma-separated string or a list); empty adds none.
    type: raw
    default: []
  name:
    description: The distribution name a path or URL is installed as.
    type: str
    default: qonnect
  variable:
    description: The variable the spec came from, named in the error for an invalid spec.
    type: str
    default: qonnect_package_spec
author:
  - qonnect.core developers (@qonnect)
"""

EXAMPLES = r"""
- name: A version from a private index
  ansible.builtin.debug:
    msg: "{{ 'qonnect==0.1.0' | qonnect.core.pip_requirement('controller') }}"  # qonnect[controller]==0.1.0

- name: A version range
  ansible.builtin.debug:
    msg: "{{ 'qonnect>=0.1,<0.2' | qonnect.core.pip_requirement('kb') }}"  # qonnect[kb]<0.2,>=0.1

- name: A wheel on the target
  ansible.builtin.debug:
    # qonnect[agent] @ file:///srv/qonnect-0.1.0-py3-none-any.whl
    msg: "{{ '/srv/qonnect-0.1.0-py3-none-any.whl' | qonnect.core.pip_requirement('agent') }}"

- name: A wheel's URL, with the variable it came from named in an error
  ansible.builtin.pip:
    name: "{{ controller_package | qonnect.core.pip_requirement('controller', variable='controller_package') }}"
    virtualenv: /opt/qonnect/venv
"""

RETURN = r"""
_value:
  description: The PEP 508 requirement, for the O(ansible.builtin.pip#module:name) option.
  type: str
"""

# PEP 508 names (and extras): letters and digits, with ., - and _ inside
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_NAME}$")
# scheme://... (https, file, git+https, ...)
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# name [extras] @ url: already a direct reference
_DIRECT_RE = re.compile(rf"^{_NAME}\s*(?:\[[^\]]*\])?\s*@")
# name [extras] rest, for the check without packaging
_REQUIREMENT_RE = re.compile(rf"^(?P<name>{_NAME})\s*(?:\[(?P<extras>[^\]]*)\])?\s*(?P<rest>.*)$", re.DOTALL)
# version specifiers (>=0.1,<0.2), for the check without packaging
_VERSION = r"\s*(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*"
_SPECIFIER_RE = re.compile(rf"^(?:{_VERSION}(?:,{_VERSION})*|\({_VERSION}(?:,{_VERSION})*\))$")
_ARCHIVES = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
_FORMS = (
    "a name with an optional version (qonnect, qonnect==0.1.0), an absolute path to a wheel "
    "or source directory, or a URL"
)


def _invalid(variable: str, spec: Any, reason: str) -> AnsibleFilterError:
    return AnsibleFilterError(f"{variable}: {spec!r} is not a pip requirement ({reason}); use {_FORMS}")


def _extras(extra: Any, variable: str) -> list[str]:
    if extra is None:
        return []
    if isinstance(extra, str):
        items = extra.split(",")
    elif isinstance(extra, (list, tuple)):
        items = list(extra)
    else:
        raise AnsibleFilterError(f"pip_requirement: the extra for {variable} must be a string or a list")
    names = []
    for item in items:
        if not isinstance(item, str):
            raise AnsibleFilterError(f"pip_requirement: the extra {item!r} for {variable} is not a string")
        text = item.strip()
        if not text:
            continue
        if not _NAME_RE.match(text):
            raise AnsibleFilterError(f"pip_requirement: {text!r} (for {variable}) is not an extra's name")
        names.append(text)
    return names


def _is_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.startswith((".", "~")) or text.lower().endswith(_ARCHIVES)


def _direct_reference(text: str, name: str, variable: str, spec: Any) -> str:
    """A path or URL as the requirement ``name @ url``; anything else as it is."""
    if _URL_RE.match(text):
        return f"{name} @ {text}"
    if _DIRECT_RE.match(text) or not _is_path(text):
        return text
    if not text.startswith("/"):
        raise _invalid(variable, spec, "a path must be absolute: it is a path on the host pip runs on")
    if text.endswith("]"):
        raise _invalid(variable, spec, "the extra is not part of a path; the role adds it")
    return f"{name} @ {PurePosixPath(text).as_uri()}"


def _with_extras_packaging(text: str, extras: list[str], variable: str, spec: Any) -> str:
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise _invalid(variable, spec, str(exc).splitlines()[0]) from None
    requirement.extras = set(requirement.extras) | set(extras)
    return str(requirement)


def _with_extras_plain(text: str, extras: list[str], variable: str, spec: Any) -> str:
    """The same without packaging: name, extras and the rest, checked coarsely."""
    match = _REQUIREMENT_RE.match(text)
    if match is None:
        raise _invalid(variable, spec, "it does not start with a distribution name")
    rest = match.group("rest").strip()
    specifier = rest.split(";", 1)[0] if not rest.startswith("@") else ""
    if specifier.strip() and not _SPECIFIER_RE.match(specifier):
        raise _invalid(variable, spec, f"{specifier.strip()!r} is not a version specifier")
    if rest.startswith("@") and not _URL_RE.match(rest[1:].strip()):
        raise _invalid(variable, spec, "the direct reference is not a URL")
    if ";" in rest and not rest.split(";", 1)[1].strip():
        raise _invalid(variable, spec, "an empty environment marker")
    have = [e.strip() for e in (match.group("extras") or "").split(",") if e.strip()]
    if any(not _NAME_RE.match(e) for e in have):
        raise _invalid(variable, spec, "an extra is not a valid name")
    merged = sorted(set(have) | set(extras))
    head = match.group("name") + (f"[{','.join(merged)}]" if merged else "")
    if rest.startswith(("@", ";")):
        return f"{head} {rest}"
    return head + rest


def pip_requirement(
    spec: Any,
    extra: Any = None,
    name: str = "qonnect",
    variable: str = "qonnect_package_spec",
) -> str:
    """``spec`` (a name, a name with a version, a path or a URL) as a PEP 508 requirement with ``extra``."""
    if not isinstance(spec, str):
        raise _invalid(variable, spec, "not a string")
    text = spec.strip()
    if not text:
        raise _invalid(variable, spec, "empty")
    if not _NAME_RE.match(name):
        raise AnsibleFilterError(f"pip_requirement: {name!r} is not a distribution name")
    extras = _extras(extra, variable)
    text = _direct_reference(text, name, variable, spec)
    if HAS_PACKAGING:
        return _with_extras_packaging(text, extras, variable, spec)
    return _with_extras_plain(text, extras, variable, spec)


class FilterModule:
    """qonnect.core's filters."""

    def filters(self) -> dict[str, Callable[..., str]]:
        return {"pip_requirement": pip_requirement}
