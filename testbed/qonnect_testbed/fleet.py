"""Fleet profiles: which clusters and nodes a testbed emulates.

A profile file (YAML or JSON) names node profiles (hardware and price of one node kind), the
tiers, the latency between tiers, and the clusters - either listed one by one (``clusters``) or
generated (``generate``), so one file can describe nine clusters or a thousand. The format is
documented in docs/testbed.md; ``expand`` turns a profile into the concrete fleet that the server
builds and that federation.py writes out (the YAML files live in profiles/).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is a dependency of the package
    yaml = None

_PARSE_ERRORS: tuple[type[Exception], ...] = (ValueError, yaml.YAMLError) if yaml else (ValueError,)

PROFILES_DIR = Path(__file__).parent / "profiles"
DEFAULT_NODE = {
    "ephemeral_storage": "100Gi",
    "pods": 110,
    "bandwidth_gbps": 1.0,
    "energy_kwh": 0.0,
    "price_eur_h": 0.0,
}
DEFAULT_SAME_LOCATION_MS = 0.1
DEFAULT_TIER_MS = 10.0


def label_number(value: float) -> str:
    """A metric as a label value: exact (repr), without a trailing '.0'."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


class ProfileError(ValueError):
    """A profile file that does not describe a fleet: the message names the field."""


def quantity(value: Any, where: str) -> float:
    """Parse a Kubernetes-style quantity ("7.16G", "512Mi", "250m", 6) into a number."""
    if isinstance(value, bool):
        raise ProfileError(f"{where}: expected a number or quantity like '8Gi', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ProfileError(f"{where}: expected a non-negative value, got {value!r}")
        return float(value)
    try:
        number = parse_quantity(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise ProfileError(f"{where}: expected a number or quantity like '8Gi', got {value!r}")
    return number


@dataclass
class NodeSpec:
    """One emulated node: capacity, metrics and labels."""

    name: str
    profile: str
    cpu: float
    memory: int
    ephemeral_storage: int
    pods: int
    bandwidth_gbps: float
    energy_kwh: float
    price_eur_h: float
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "profile": self.profile,
            "cpu": self.cpu,
            "memory": self.memory,
            "ephemeral_storage": self.ephemeral_storage,
            "pods": self.pods,
            "bandwidth_gbps": self.bandwidth_gbps,
            "energy_kwh": self.energy_kwh,
            "price_eur_h": self.price_eur_h,
            "labels": dict(self.labels),
            "taints": [dict(t) for t in self.taints],
        }


@dataclass
class ClusterSpec:
    """One emulated cluster: its identity and its nodes."""

    name: str
    tier: str
    location: str
    nodes: list[NodeSpec]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Fleet:
    """The expanded profile: every cluster with its nodes, and the latency between locations."""

    name: str
    clusters: list[ClusterSpec]
    latency_ms: dict[str, dict[str, float]]
    start_delays: list[dict[str, Any]] = field(default_factory=list)


def load(profile: str) -> dict[str, Any]:
    """Read a profile by built-in name (e.g. ``paper``) or by file path."""
    path = Path(profile)
    if not path.exists():
        builtin = PROFILES_DIR / f"{profile}.yml"
        if "/" in profile or not builtin.exists():
            names = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yml")))
            raise ProfileError(f"profile {profile!r}: no such file or built-in profile ({names})")
        path = builtin
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            if yaml is None:
                raise ProfileError("reading YAML profiles needs PyYAML (pip install PyYAML)")
            data = yaml.safe_load(text)
    except _PARSE_ERRORS as exc:
        raise ProfileError(f"profile {path}: not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping at the top level")
    data.setdefault("name", path.stem)
    return data


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _labels(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value, where).items()}


def _node(
    cluster: str,
    tier: str,
    index: int,
    count: int,
    entry: dict[str, Any],
    node_profiles: dict[str, Any],
    where: str,
) -> NodeSpec:
    prof_name = entry.get("profile")
    if prof_name is not None and prof_name not in node_profiles:
        known = ", ".join(sorted(node_profiles)) or "none defined"
        raise ProfileError(f"{where}.profile: unknown node profile {prof_name!r} (known: {known})")
    merged = {
        **DEFAULT_NODE,
        **_mapping(node_profiles.get(prof_name), f"node_profiles.{prof_name}"),
        **{k: v for k, v in entry.items() if k not in ("profile", "name", "labels", "taints")},
    }
    if "cpu" not in merged or "memory" not in merged:
        raise ProfileError(f"{where}: needs cpu and memory (directly or from its profile)")
    name = entry.get("name") or (f"{cluster}-worker" if count == 1 else f"{cluster}-worker-{index + 1}")
    try:
        return NodeSpec(
            name=str(name),
            profile=str(prof_name or "custom"),
            cpu=quantity(merged["cpu"], f"{where}.cpu"),
            memory=int(quantity(merged["memory"], f"{where}.memory")),
            ephemeral_storage=int(quantity(merged["ephemeral_storage"], f"{where}.ephemeral_storage")),
            pods=int(quantity(merged["pods"], f"{where}.pods")),
            bandwidth_gbps=quantity(merged["bandwidth_gbps"], f"{where}.bandwidth_gbps"),
            energy_kwh=quantity(merged["energy_kwh"], f"{where}.energy_kwh"),
            price_eur_h=quantity(merged["price_eur_h"], f"{where}.price_eur_h"),
            labels={
                **_labels(_mapping(node_profiles.get(prof_name), "").get("labels"), where),
                **_labels(entry.get("labels"), f"{where}.labels"),
            },
            taints=_taints(
                entry["taints"]
                if "taints" in entry
                else _mapping(node_profiles.get(prof_name), "").get("taints"),
                f"{where}.taints",
            ),
        )
    except ProfileError:
        raise
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: {exc}") from None


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _taints(value: Any, where: str) -> list[dict[str, str]]:
    """Node taints as `kubectl taint` sets them: key, optional value, effect."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProfileError(f"{where}: expected a list of {{key, value, effect}}")
    out = []
    for i, taint in enumerate(value):
        taint = _mapping(taint, f"{where}[{i}]")
        key, effect = taint.get("key"), taint.get("effect")
        if not isinstance(key, str) or not re.fullmatch(
            r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", key
        ):
            raise ProfileError(f"{where}[{i}].key: expected a label-like key, got {key!r}")
        if effect not in _TAINT_EFFECTS:
            raise ProfileError(f"{where}[{i}].effect: expected one of {list(_TAINT_EFFECTS)}, got {effect!r}")
        item = {"key": key, "effect": effect}
        if taint.get("value") not in (None, ""):
            item["value"] = str(taint["value"])
        out.append(item)
    return out


def parse_start_delays(value: Any) -> list[dict[str, Any]]:
    """Per-image start delays: [{image: glob, seconds: S, jitter: J}], first match wins."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProfileError("start_delays: expected a list of {image, seconds, jitter}")
    out = []
    for i, rule in enumerate(value):
        rule = _mapping(rule, f"start_delays[{i}]")
        if not isinstance(rule.get("image"), str) or not rule["image"]:
            raise ProfileError(
                f"start_delays[{i}].image: expected an image pattern such as 'docker.io/istio/*'"
            )
        out.append(
            {
                "image": rule["image"],
                "seconds": quantity(rule.get("seconds", 0), f"start_delays[{i}].seconds"),
                "jitter": quantity(rule.get("jitter", 0), f"start_delays[{i}].jitter"),
            }
        )
    return out


def _generated(
    gen: dict[str, Any],
    tiers: list[str],
    clusters: int | None,
    nodes: int | None,
    node_profiles: dict[str, Any],
) -> list[dict[str, Any]]:
    """Clusters spread evenly over the tiers; node j of cluster k gets profile (k-1+j) mod P."""
    count = clusters if clusters is not None else gen.get("clusters", len(tiers))
    per = nodes if nodes is not None else gen.get("nodes", 1)
    for key, value in (("generate.clusters", count), ("generate.nodes", per)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ProfileError(f"{key}: expected a positive integer, got {value!r}")
    profs = gen.get("node_profiles", list(node_profiles))
    if not isinstance(profs, list) or not profs:
        raise ProfileError("generate.node_profiles: expected a non-empty list of profile names")
    gen_tiers = gen.get("tiers", tiers)
    if not isinstance(gen_tiers, list) or not gen_tiers:
        raise ProfileError("generate.tiers: expected a non-empty list of tier names")
    labels = _labels(gen.get("labels"), "generate.labels")
    out: list[dict[str, Any]] = []
    for t, tier in enumerate(gen_tiers):
        in_tier = count // len(gen_tiers) + (1 if t < count % len(gen_tiers) else 0)
        for k in range(1, in_tier + 1):
            out.append(
                {
                    "name": f"{tier}-{k}",
                    "tier": tier,
                    "nodes": [{"profile": profs[(k - 1 + j) % len(profs)]} for j in range(per)],
                    "labels": dict(labels),
                }
            )
    return out


def _latency(clusters: list[ClusterSpec], spec: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Latency between locations from the tier table, then explicit per-location overrides."""
    same = quantity(spec.get("same_location", DEFAULT_SAME_LOCATION_MS), "latency.same_location")
    default = quantity(spec.get("default", DEFAULT_TIER_MS), "latency.default")
    table = _mapping(spec.get("tiers"), "latency.tiers")
    tier_of = {c.location: c.tier for c in clusters}
    matrix: dict[str, dict[str, float]] = {}
    for a, ta in tier_of.items():
        row = matrix.setdefault(a, {})
        for b, tb in tier_of.items():
            if a == b:
                row[b] = same
                continue
            value = _mapping(table.get(ta), f"latency.tiers.{ta}").get(tb)
            if value is None:
                value = _mapping(table.get(tb), f"latency.tiers.{tb}").get(ta, default)
            row[b] = quantity(value, f"latency.tiers.{ta}.{tb}")
    for a, row in _mapping(spec.get("locations"), "latency.locations").items():
        for b, value in _mapping(row, f"latency.locations.{a}").items():
            if a in matrix and b in matrix:
                matrix[a][b] = quantity(value, f"latency.locations.{a}.{b}")
    return matrix


def expand(data: dict[str, Any], clusters: int | None = None, nodes: int | None = None) -> Fleet:
    """Turn a profile into concrete clusters and nodes; ``clusters``/``nodes`` rescale it."""
    node_profiles = _mapping(data.get("node_profiles"), "node_profiles")
    tiers = data.get("tiers", ["cloud", "fog", "edge"])
    if not isinstance(tiers, list) or not all(isinstance(t, str) for t in tiers):
        raise ProfileError("tiers: expected a list of tier names")
    if "clusters" in data:
        entries = data["clusters"]
        if not isinstance(entries, list) or not entries:
            raise ProfileError("clusters: expected a non-empty list of clusters")
        if clusters is not None:
            if clusters < 1 or clusters > len(entries):
                raise ProfileError(
                    f"--clusters: this profile lists {len(entries)} clusters; "
                    f"expected 1..{len(entries)}, got {clusters}"
                )
            entries = entries[:clusters]
        if nodes is not None:
            raise ProfileError("--nodes: only profiles with a 'generate' section can be rescaled")
    elif "generate" in data:
        entries = _generated(_mapping(data["generate"], "generate"), tiers, clusters, nodes, node_profiles)
    else:
        raise ProfileError("profile: expected a 'clusters' list or a 'generate' section")
    built: list[ClusterSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"clusters[{i}]"
        entry = _mapping(entry, where)
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
            raise ProfileError(f"{where}.name: expected a DNS label like 'edge-1', got {name!r}")
        if name in seen:
            raise ProfileError(f"{where}.name: duplicate cluster name {name!r}")
        seen.add(name)
        tier = entry.get("tier")
        if tier not in tiers:
            raise ProfileError(f"{where}.tier: expected one of {tiers}, got {tier!r}")
        node_entries = entry.get("nodes", [{}])
        if not isinstance(node_entries, list) or not node_entries:
            raise ProfileError(f"{where}.nodes: expected a non-empty list of nodes")
        node_list = [
            _node(
                name,
                tier,
                j,
                len(node_entries),
                _mapping(n, f"{where}.nodes[{j}]"),
                node_profiles,
                f"{where}.nodes[{j}]",
            )
            for j, n in enumerate(node_entries)
        ]
        if len({n.name for n in node_list}) != len(node_list):
            raise ProfileError(f"{where}.nodes: node names must be unique in a cluster")
        built.append(
            ClusterSpec(
                name=name,
                tier=tier,
                location=str(entry.get("location", name)),
                nodes=node_list,
                labels=_labels(entry.get("labels"), f"{where}.labels"),
            )
        )
    return Fleet(
        name=str(data.get("name", "custom")),
        clusters=built,
        latency_ms=_latency(built, _mapping(data.get("latency_ms"), "latency_ms")),
        start_delays=parse_start_delays(data.get("start_delays")),
    )
