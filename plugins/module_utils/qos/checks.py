# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared checks of a QoS spec's parts, each recording 'path: what is wrong' and carrying on.

:class:`SpecChecker` is the base of the format readers: it collects every error instead of
stopping at the first, so a user fixes a spec in one pass (QosSpecError lists them all).
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import MAX_GRACE_SECONDS
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import Application, QosSpecError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

_SHAPES: dict[type, str] = {dict: "a mapping", list: "a list"}


def typename(value: Any) -> str:
    """How an error message names a value's YAML type ("a mapping", "nothing", ...)."""
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "nothing",
    }
    return names.get(type(value), type(value).__name__)


def finite(value: Any) -> TypeGuard[float]:
    """A real number: YAML's booleans, .inf and .nan are not weights or durations."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def label_key_problem(key: Any) -> str | None:
    """Why `key` is not a Kubernetes label key ([prefix/]name), None when it is one."""
    if not isinstance(key, str) or not key:
        return f"{key!r} is not a label key (a non-empty string)"
    prefix, _slash, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{key!r} is not a label key: the prefix must be a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return (
            f"{key!r} is not a label key: the name part must be at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: Any) -> str | None:
    """Why `value` is not a Kubernetes label value, None when it is one."""
    if not isinstance(value, str):
        return f"{value!r} is {typename(value)}, not a string (quote it)"
    if not _LABEL_VALUE.match(value):
        return (
            f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


class SpecChecker:
    """Walks one spec, collecting every error instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def err(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def finish(
        self, name: str, namespace: str, labels: dict, objective: dict, services: list, **extra: Any
    ) -> Application:
        """The application the spec describes, or QosSpecError listing every problem found."""
        if self.errors:
            raise QosSpecError(self.errors)
        return Application(
            name=name, namespace=namespace, labels=labels, objective=objective, services=services, **extra
        )

    # -- generic checks -------------------------------------------------------------------
    def shaped(self, value: Any, kind: type, path: str, what: str = "") -> bool:
        """``value`` is absent (None) or a ``kind``; otherwise records "expected <what>, got <type>"."""
        if value is None or isinstance(value, kind):
            return True
        self.err(path, f"expected {what or _SHAPES[kind]}, got {typename(value)}")
        return False

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.err(path or "spec", f"expected a mapping, got {typename(value)}")
            return {}
        if allowed is not None:
            for key in sorted(set(value) - set(allowed), key=str):
                self.err(
                    f"{path}.{key}" if path else str(key),
                    f"unknown field; expected one of {', '.join(allowed)}",
                )
        return value

    def weight(self, value: Any, path: str) -> float:
        if value is None:
            return 0.0
        if not finite(value) or not 0 <= value <= 1:
            self.err(path, f"{value!r} is not a number between 0 and 1")
            return 0.0
        return float(value)

    def grace(self, value: Any, path: str, zero: bool = False) -> float | None:
        """Seconds in (0, a week], or [0, a week] when ``zero`` is allowed; None when absent."""
        if value is None:
            return None
        low = "[" if zero else "("
        if not finite(value) or value < 0 or (value == 0 and not zero) or value > MAX_GRACE_SECONDS:
            self.err(path, f"{value!r} is not a number of seconds in {low}0, {MAX_GRACE_SECONDS}]")
            return None
        return float(value)

    def integer(self, value: Any, path: str, default: int, minimum: int, maximum: int | None = None) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.err(path, f"{value!r} is not an integer >= {minimum}")
            return default
        if maximum is not None and value > maximum:
            self.err(path, f"{value} is more than the limit of {maximum}")
            return default
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _DNS_LABEL.match(value):
            self.err(
                path,
                f"{value!r} is not a DNS label (lower-case letters, digits and '-', at most 63 characters)",
            )
            return str(value)
        return value

    def labels(self, value: Any, path: str) -> dict:
        out = {}
        for key, val in self.mapping(value, path).items():
            problem = label_key_problem(key)
            if problem:
                self.err(f"{path}.{key}", problem)
                continue
            problem = label_value_problem(val)
            if problem:
                self.err(f"{path}.{key}", problem)
                continue
            out[key] = val
        return out

    def metadata(self, data: dict, allowed: tuple[str, ...]) -> tuple[str, str, dict, dict]:
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            self.err("metadata", f"expected a mapping with at least 'name', got {typename(meta)}")
            meta = {}
        self.mapping(meta, "metadata", allowed)
        name = self.name(meta.get("name"), "metadata.name")
        ns = meta.get("namespace")
        namespace = self.name(ns, "metadata.namespace") if ns is not None else name
        labels = self.labels(meta.get("labels"), "metadata.labels")
        return name, namespace, labels, meta
