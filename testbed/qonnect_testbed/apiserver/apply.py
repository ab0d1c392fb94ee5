"""Field ownership: managedFields, server-side apply with conflicts, and Update managers.

A field set is a set of paths in the fieldsV1 key syntax ("f:spec", "k:{\"name\":\"web\"}",
"v:\"x\""); each manager's set is stored in metadata.managedFields as real servers do. Apply
merges the applied configuration into the live object (associative lists by their keys from
the schema), removes fields the manager applied before and no longer applies unless another
manager owns them, and reports fields another manager owns with a different value as conflicts.
"""

from __future__ import annotations

import json
from typing import Any

from qonnect_testbed.apiserver.schema import Node
from qonnect_testbed.store import ApiError, json_copy, now_rfc3339

Path = tuple[str, ...]
_SKIP_META = frozenset(
    (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    )
)
_MISSING = object()
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# Upstream's OpenAPI gives these list-map key fields a default (kubernetes-validate's copy drops
# "default"); structured merge fills a missing key field with it, so {containerPort: 80} and the
# stored {containerPort: 80, protocol: TCP} are the same list item.
_KEY_DEFAULTS = {"protocol": "TCP"}


def _item_identity(item: Any, keys: list[str]) -> dict:
    if not isinstance(item, dict):
        return {}
    return {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys if k in item or k in _KEY_DEFAULTS}


def _item_key(item: Any, keys: list[str]) -> str:
    return "k:" + _dump(_item_identity(item, keys))


def field_set(obj: dict, node: Node) -> set[Path]:
    """The leaf and list-item paths set in obj (status and identity metadata excluded)."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _SKIP_META}
            _walk(meta, node.field("metadata"), ("f:metadata",), out)
        else:
            _walk_value(value, node.field(key), ("f:" + key,), out)
    return out


def _walk(obj: dict, node: Node, path: Path, out: set[Path]) -> None:
    for key, value in obj.items():
        _walk_value(value, node.field(key), (*path, "f:" + key), out)


def _walk_value(value: Any, node: Node, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value and not node.is_atomic_map:
        _walk(value, node, path, out)
    elif isinstance(value, list) and value and (node.list_map_keys or node.is_set):
        keys = node.list_map_keys
        for item in value:
            if keys:
                item_path = (*path, _item_key(item, keys))
                out.add(item_path)
                if isinstance(item, dict):
                    _walk(item, node.items(), item_path, out)
            else:
                out.add((*path, "v:" + _dump(item)))
    else:
        out.add(path)


def _child(container: Any, token: str) -> Any:
    kind, _colon, rest = token.partition(":")
    if kind == "f":
        return container.get(rest, _MISSING) if isinstance(container, dict) else _MISSING
    if not isinstance(container, list):
        return _MISSING
    if kind == "k":
        want = json.loads(rest)
        return next(
            (
                i
                for i in container
                if isinstance(i, dict) and all(i.get(k, _KEY_DEFAULTS.get(k)) == v for k, v in want.items())
            ),
            _MISSING,
        )
    value = json.loads(rest)
    return value if value in container else _MISSING


def value_at(obj: Any, path: Path) -> Any:
    """The value at a field path, or a sentinel when absent."""
    cur = obj
    for token in path:
        cur = _child(cur, token)
        if cur is _MISSING:
            return _MISSING
    return cur


def _remove_path(obj: dict, path: Path) -> None:
    parent = value_at(obj, path[:-1])
    if parent is _MISSING:
        return
    token = path[-1]
    kind, _colon, rest = token.partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif isinstance(parent, list):
        target = _child(parent, token)
        if target is not _MISSING:
            parent.remove(target)


def _prune_empty(obj: Any, applied: Any) -> None:
    """Drop maps emptied by removals, unless the applied config itself set them empty."""
    if not isinstance(obj, dict):
        return
    for key in list(obj):
        value = obj[key]
        sub_applied = applied.get(key) if isinstance(applied, dict) else None
        if isinstance(value, dict):
            _prune_empty(value, sub_applied)
            if not value and sub_applied is None:
                obj.pop(key)


# --------------------------------------------------------------------------- fieldsV1


def to_fields_v1(paths: set[Path]) -> dict:
    """Nest a path set into the fieldsV1 tree ("." marks an owned node that has children)."""
    tree: dict = {}
    for path in sorted(paths):
        cur = tree
        for token in path:
            cur = cur.setdefault(token, {})
    for path in paths:
        cur = tree
        for token in path:
            cur = cur[token]
        if cur and "." not in cur:
            cur["."] = {}
    return tree


def from_fields_v1(tree: dict, prefix: Path = ()) -> set[Path]:
    """The path set of a fieldsV1 tree."""
    out: set[Path] = set()
    for token, sub in tree.items():
        if token == ".":
            out.add(prefix)
            continue
        path = (*prefix, token)
        if not sub:
            out.add(path)
        else:
            out |= from_fields_v1(sub, path)
    return out


Managers = dict[tuple[str, str, str], set[Path]]  # (manager, operation, subresource) -> paths


def read_managers(obj: dict) -> Managers:
    out: Managers = {}
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        if isinstance(entry, dict) and entry.get("fieldsType", "FieldsV1") == "FieldsV1":
            key = (
                str(entry.get("manager", "")),
                str(entry.get("operation", "Update")),
                str(entry.get("subresource", "")),
            )
            out[key] = from_fields_v1(entry.get("fieldsV1") or {})
    return out


def write_managers(
    obj: dict, managers: Managers, api_version: str, touched: tuple[str, str, str] | None
) -> None:
    """Store managers into obj's managedFields; touched gets a fresh time."""
    previous = {
        (e.get("manager", ""), e.get("operation", "Update"), e.get("subresource", "")): e
        for e in obj.get("metadata", {}).get("managedFields") or []
        if isinstance(e, dict)
    }
    entries = []
    for key, paths in managers.items():
        if not paths:
            continue
        manager, operation, subresource = key
        old = previous.get(key, {})
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": now_rfc3339() if key == touched or not old.get("time") else old["time"],
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(paths),
        }
        if subresource:
            entry["subresource"] = subresource
        entries.append(entry)
    if entries:
        obj["metadata"]["managedFields"] = entries
    else:
        obj["metadata"].pop("managedFields", None)


# --------------------------------------------------------------------------- operations


def _merge(live: Any, applied: Any, node: Node) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict) and not node.is_atomic_map:
        out = dict(live)
        for key, value in applied.items():
            out[key] = _merge(live.get(key), value, node.field(key))
        return out
    if isinstance(live, list) and isinstance(applied, list):
        keys = node.list_map_keys
        if keys:
            out = list(live)
            for item in applied:
                want = _item_identity(item, keys)
                index = next(
                    (
                        i
                        for i, o in enumerate(out)
                        if isinstance(o, dict) and _item_identity(o, list(want)) == want
                    ),
                    None,
                )
                if index is None:
                    out.append(json_copy(item))
                else:
                    out[index] = _merge(out[index], item, node.items())
            return out
        if node.is_set:
            return list(live) + [v for v in applied if v not in live]
    return json_copy(applied)


def _describe(path: Path) -> str:
    text = ""
    for token in path:
        kind, _colon, rest = token.partition(":")
        text += f".{rest}" if kind == "f" else f"[{'=' if kind == 'v' else ''}{rest}]"
    return text


def _quote(name: str) -> str:
    return json.dumps(name)


def _manager_names(live: dict) -> dict[str, str]:
    """How conflicts name a manager: '"alice"' for appliers, '"bob" using v1' for updaters."""
    out: dict[str, str] = {}
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if isinstance(entry, dict):
            name = str(entry.get("manager", ""))
            if entry.get("operation") == "Update":
                out.setdefault(name, f"{_quote(name)} using {entry.get('apiVersion', 'v1')}")
            else:
                out[name] = _quote(name)
    return out


def server_side_apply(
    live: dict | None, applied: dict, node: Node, manager: str, force: bool, api_version: str
) -> dict:
    """The object after manager applies applied to live (None when creating); 409 on conflicts."""
    live = json_copy(live) if live is not None else {"metadata": {}}
    managers = read_managers(live)
    me = (manager, "Apply", "")
    new_set = field_set(applied, node)
    conflicts: list[tuple[str, Path]] = []
    for key, paths in managers.items():
        if key == me:
            continue
        for path in paths & new_set:
            if value_at(live, path) != value_at(applied, path) and not path[-1].startswith(("k:", "v:")):
                conflicts.append((key[0], path))
    if conflicts and not force and _covered_by_last_applied(live, node, conflicts):
        force = True  # ownership moves from client-side to server-side apply without conflicts
    if conflicts and not force:
        conflicts.sort()
        who = _manager_names(live)
        causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {who.get(m, _quote(m))}",
                "field": _describe(p),
            }
            for m, p in conflicts
        ]
        lines = "\n".join(f"- conflict with {who.get(m, _quote(m))}: {_describe(p)}" for m, p in conflicts)
        raise ApiError(
            409,
            "Conflict",
            f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: {lines.lstrip('- ')}"
            if len(conflicts) == 1
            else f"Apply failed with {len(conflicts)} conflicts:\n{lines}",
            {"causes": causes},
        )
    for owner, path in conflicts:
        for key in managers:
            if key[0] == owner and key != me:
                managers[key].discard(path)
    previous = managers.get(me, set())
    merged = _merge(live, {k: v for k, v in applied.items() if k != "status"}, node)
    others: set[Path] = set().union(*(p for k, p in managers.items() if k != me))
    for path in sorted(previous - new_set - others, key=len):  # list items before their fields
        if value_at(applied, path) is _MISSING:  # never drop what this apply sets
            _remove_path(merged, path)
    _prune_empty(merged, applied)
    managers[me] = new_set
    write_managers(merged, managers, api_version, me)
    annotations = merged["metadata"].get("annotations") or {}
    if manager == "kubectl" and LAST_APPLIED in annotations:  # keep kubectl's client-side view current
        annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
    return merged


def _covered_by_last_applied(live: dict, node: Node, conflicts: list[tuple[str, Path]]) -> bool:
    """Whether every conflict is a field of the kubectl last-applied-configuration annotation."""
    text = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        last = json.loads(text) if text else None
    except ValueError:
        return False
    if not isinstance(last, dict):
        return False
    fields = field_set(last, node)
    return all(path in fields for _manager, path in conflicts)


def record_update(
    old: dict | None, new: dict, node: Node, manager: str, api_version: str, subresource: str = ""
) -> None:
    """Give manager the fields a create/update/patch set or changed; others lose them.

    A request that itself changes metadata.managedFields (e.g. kubectl migrating client-side
    apply ownership) sets them, as on real servers; an empty entry list resets ownership.
    """
    given = new.get("metadata", {}).get("managedFields")
    previous = (old or {}).get("metadata", {}).get("managedFields")
    managers = read_managers(new if given is not None and given != previous else old or {})
    before = old or {}
    changed = {p for p in field_set(new, node) if value_at(before, p) != value_at(new, p)}
    kept = field_set(new, node)
    me = (manager, "Update", subresource)
    for key in managers:
        managers[key] = (managers[key] - changed if key != me else managers[key]) & kept
    managers[me] = (managers.get(me, set()) | changed) & kept
    write_managers(new, managers, api_version, me if changed else None)
