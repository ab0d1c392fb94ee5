# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which strings of the module arguments Ansible must mask in every output.

Options that can hold kubeconfig content (``kubeconfigs``, ``k8s_kubeconfig``) are ``no_log``,
so syslog gets ``NOT_LOGGING_PARAMETER`` for them. But Ansible would then also mask every other
string of that content wherever it appears in the result: cluster and context names, ``v1``,
``default``, so a plan would read ``VALUE_SPECIFIED_IN_NO_LOG_PARAMETER -> ...``. Here the
masked strings of such an option are narrowed to its credentials (everything under ``users``,
and any value whose key names a token, password, secret, key or proxy), as kubernetes.core
redacts kubeconfig content; every other ``no_log`` option stays masked whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

try:
    import yaml

    HAS_YAML = True
except ImportError:  # kubeconfig text then stays masked whole
    HAS_YAML = False

# options whose value is a kubeconfig (path or content) or a mapping of name -> kubeconfig
KUBECONFIG_OPTIONS = {"k8s_kubeconfig": False, "kubeconfigs": True}
SECRET_KEY = re.compile(r"token|password|secret|key|proxy", re.IGNORECASE)


def strings(value: Any) -> Iterator[str]:
    """Every non-empty string (and number, as text) inside a value, as Ansible collects them."""
    if isinstance(value, (bytes, str)):
        if value:
            yield value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from strings(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


def _secret_leaves(doc: Any, secret: bool = False) -> Iterator[str]:
    if isinstance(doc, Mapping):
        for key, item in doc.items():
            below = secret or str(key) == "users" or bool(SECRET_KEY.search(str(key)))
            yield from _secret_leaves(item, below)
    elif isinstance(doc, (list, tuple)):
        for item in doc:
            yield from _secret_leaves(item, secret)
    elif secret:
        yield from strings(doc)


def kubeconfig_secrets(value: Any) -> set[str]:
    """The credential strings of one kubeconfig given as a path (none), a mapping or YAML text
    (the whole text too, and all of it when it cannot be read as a mapping)."""
    if isinstance(value, Mapping):
        return set(_secret_leaves(value))
    if isinstance(value, str) and "\n" in value.strip():
        loaded = None
        if HAS_YAML:
            try:
                loaded = yaml.safe_load(value)
            except yaml.YAMLError:
                loaded = None
        return {value} | (set(_secret_leaves(loaded)) if isinstance(loaded, Mapping) else set())
    return set() if isinstance(value, str) or value is None else set(strings(value))


def no_log_values(
    argument_spec: Mapping[str, Mapping[str, Any]], params: Mapping[str, Any], current: set[str]
) -> set[str]:
    """``current`` (AnsibleModule.no_log_values) with each kubeconfig option's strings replaced by
    its credentials; the strings of every other ``no_log`` option stay."""
    broad: set[str] = set()
    narrow: set[str] = set()
    kept: set[str] = set()
    for name, opts in argument_spec.items():
        value = params.get(name)
        if not opts.get("no_log") or value is None:
            continue
        if name not in KUBECONFIG_OPTIONS:
            kept.update(strings(value))
            continue
        broad.update(strings(value))
        many = KUBECONFIG_OPTIONS[name] and isinstance(value, Mapping)
        for one in value.values() if many else [value]:
            narrow |= kubeconfig_secrets(one)
    return (set(current) - broad) | narrow | kept
