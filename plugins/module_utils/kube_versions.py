# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes versions, Helm's ``kubeVersion`` constraints, and what a chart is rendered for.

One home for three things the renderer (``qos/manifests.py``), the placement filter
(``placement/filters.py`` ``KubeVersion``) and the spec reader share:

* a cluster's version as Helm reads it (``chartutil.ParseKubeVersion``: the leading
  major.minor.patch of ``gitVersion``, so ``v1.28.3-eks-4f4795d`` is 1.28.3);
* a ``kubeVersion`` constraint as Helm checks it (Masterminds semver v3: ``||`` alternatives of
  comma- or space-separated comparisons, ``=``, ``!=``, ``>``, ``<``, ``>=``, ``<=``, ``~``,
  ``^``, hyphen ranges and ``x``/``*`` wildcards), so a cluster the chart refuses is ineligible
  with a reason instead of failing the whole render;
* the render target (:func:`render_target`): the lowest version and the intersection of the
  served API group-versions of the candidate clusters (the inventory's clusters the constraints
  admit), so one rendering, stored and reused by the controller wherever the service moves
  later, is valid on every cluster it may go to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# the cap on one cluster's reported group-versions (a real v1.34 server serves ~30; CRDs add more)
MAX_API_VERSIONS = 1000
MAX_CONSTRAINT_LENGTH = 256

_KUBE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")
_PART = r"(?:0|[1-9]\d*|[xX*])"
_VERSION = re.compile(
    rf"^v?({_PART})(?:\.({_PART}))?(?:\.({_PART}))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_OPS = ("!=", ">=", "=>", "<=", "=<", "~>", ">", "<", "=", "~", "^", "")
_HYPHEN = re.compile(r"^\s*(\S+)\s+-\s+(\S+)\s*$")
_WILD = ("x", "X", "*")
_TOKEN = re.compile(r"(?:!=|>=|=>|<=|=<|~>|>|<|=|~|\^)?\s*[0-9vxX*][^\s,<>=~^!]*")

Triple = tuple[int, int, int]


class ConstraintError(ValueError):
    """A kubeVersion constraint Helm would not parse."""


def kube_version(value: Any) -> Triple | None:
    """A cluster's version as Helm reads it (leading major.minor[.patch]); None when unknown."""
    if not isinstance(value, str):
        return None
    found = _KUBE.match(value)
    if not found:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)


def version_text(version: Triple) -> str:
    return "v{}.{}.{}".format(*version)


class _Bound:
    """One parsed version of a constraint: its numbers, which parts were wildcards or missing
    ("dirty", as Masterminds says) and its prerelease."""

    def __init__(self, text: str):
        found = _VERSION.match(text.strip())
        if not found:
            raise ConstraintError(f"{text!r} is not a version")
        parts = [found.group(i) for i in (1, 2, 3)]
        self.given = 0
        nums: list[int] = []
        for part in parts:
            if part is None or part in _WILD:
                break
            nums.append(int(part))
            self.given += 1
        self.nums: Triple = (*nums, *([0] * (3 - len(nums))))  # type: ignore[assignment]
        self.pre = found.group(4)

    @property
    def dirty(self) -> bool:
        return self.given < 3

    def compare(self, v: Triple) -> int:
        """-1, 0, 1 as ``v`` is below, equal to or above this bound (a release is above its own
        prereleases, as in semver)."""
        if v != self.nums:
            return -1 if v < self.nums else 1
        return 1 if self.pre else 0

    def upper(self, caret: bool) -> Triple:
        """The exclusive upper end of ``~`` (next minor, or next major when only the major is
        given) and ``^`` (next major, or the next minor/patch below 1.0)."""
        major, minor, patch = self.nums
        if caret:
            if major > 0 or self.given <= 1:
                return (major + 1, 0, 0)
            if minor > 0 or self.given == 2:
                return (0, minor + 1, 0)
            return (0, 0, patch + 1)
        if self.given <= 1:
            return (major + 1, 0, 0)
        return (major, minor + 1, 0)


def _wildcard_match(b: _Bound, v: Triple) -> bool:
    return v[: b.given] == b.nums[: b.given]


def _check(op: str, b: _Bound, v: Triple) -> bool:
    cmp = b.compare(v)
    if op in ("", "="):
        return _wildcard_match(b, v) if b.dirty else cmp == 0
    if op == "!=":
        return not (_wildcard_match(b, v) if b.dirty else cmp == 0)
    if op in (">=", "=>"):
        return cmp >= 0
    if op == ">":
        if not b.dirty:
            return cmp > 0
        return v[: b.given] > b.nums[: b.given]  # >1.2 is >=1.3.0, >1 is >=2.0.0
    if op == "<":
        return cmp < 0
    if op in ("<=", "=<"):
        if not b.dirty:
            return cmp <= 0
        return v[: b.given] <= b.nums[: b.given]  # <=1.2 is <1.3.0
    if op in ("~", "~>", "^"):
        return cmp >= 0 and v < b.upper(caret=op == "^")
    raise ConstraintError(f"unknown operator {op!r}")  # pragma: no cover - _OPS is exhaustive


def _parse_one(text: str) -> tuple[str, _Bound]:
    for op in _OPS:
        if text.startswith(op):
            return op, _Bound(text[len(op) :].strip())
    raise ConstraintError(f"{text!r} is not a comparison")  # pragma: no cover


def _group(text: str) -> list[tuple[str, _Bound]]:
    """One ``||`` alternative: its comparisons (hyphen ranges become >= and <=)."""
    hyphen = _HYPHEN.match(text)
    if hyphen:
        return [(">=", _Bound(hyphen.group(1))), ("<=", _Bound(hyphen.group(2)))]
    # "a, b" and "a b" both mean AND; an operator may be followed by spaces (">= 1.2")
    tokens = [t.replace(" ", "") for t in _TOKEN.findall(text)]
    if not tokens or "".join(tokens) != re.sub(r"[\s,]", "", text):
        raise ConstraintError(f"{text.strip()!r} is not a list of comparisons (e.g. '>=1.23.0-0 <1.35.0')")
    return [_parse_one(t) for t in tokens]


def parse_constraint(text: Any) -> list[list[tuple[str, _Bound]]]:
    """A constraint's ``||`` alternatives; ConstraintError names what Helm would refuse."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError(f"{text!r} is not a kubeVersion constraint (e.g. '>=1.23.0-0')")
    if len(text) > MAX_CONSTRAINT_LENGTH:
        raise ConstraintError(f"longer than {MAX_CONSTRAINT_LENGTH} characters")
    return [_group(alt) for alt in text.split("||")]


def satisfies(constraint: str, version: Triple) -> bool:
    """Whether a Kubernetes version meets a chart's ``kubeVersion`` (as ``helm template`` checks)."""
    return any(all(_check(op, b, version) for op, b in alt) for alt in parse_constraint(constraint))


def admits(constraints: Iterable[str], version: Triple | None) -> bool:
    """Every constraint holds; an unknown version is admitted (nothing says otherwise)."""
    return version is None or all(satisfies(c, version) for c in constraints)


def api_versions(value: Any) -> list[str]:
    """A cluster's served group-versions as reported (strings only, bounded, sorted)."""
    if not isinstance(value, list):
        return []
    return sorted({v for v in value if isinstance(v, str) and v and len(v) <= 253})[:MAX_API_VERSIONS]


def render_target(clusters: Iterable[Any], constraints: Iterable[str] = ()) -> tuple[str | None, list[str]]:
    """What to render a chart for: the lowest ``kube_version`` and the intersection of the
    ``api_versions`` of the clusters (inventory entries) whose version the constraints admit.

    (None, []) when no such cluster reports a version: Helm's own default then (its client-go's
    release). Clusters without a reported version do not narrow either.
    """
    constraints = list(constraints)
    lowest: Triple | None = None
    common: set[str] | None = None
    for entry in clusters:
        if not isinstance(entry, dict):
            continue
        version = kube_version(entry.get("kube_version"))
        if version is None or not admits(constraints, version):
            continue
        lowest = version if lowest is None else min(lowest, version)
        served = api_versions(entry.get("api_versions"))
        if served:
            common = set(served) if common is None else common & set(served)
    if lowest is None:
        return None, []
    return version_text(lowest), sorted(common or ())
