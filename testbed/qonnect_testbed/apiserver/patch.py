"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge follows the patch strategy and merge key of each list in the type's schema and
the directives kubectl sends ($patch, $retainKeys, $deleteFromPrimitiveList/, $setElementOrder/).
"""

from __future__ import annotations

from typing import Any

from qonnect_testbed.apiserver.schema import Node
from qonnect_testbed.store import ApiError, json_copy


def _patch_error(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


# --------------------------------------------------------------------------- JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f"json patch: path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            raise _patch_error(f"json patch: path {path!r} does not exist")
    return cur, tokens[-1]


def _read(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _patch_error(f"json patch: path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any, *, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _patch_error(f"json patch: replace of missing path {path!r}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise _patch_error(f"json patch: index {last!r} out of range in {path!r}")
    else:
        raise _patch_error(f"json patch: path {path!r} does not point into an object or array")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _patch_error("json patch: cannot remove the whole document")
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _patch_error(f"json patch: path {path!r} does not exist")


def json_patch(doc: dict, ops: Any) -> dict:
    """Apply an RFC 6902 operation list to a copy of doc."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch: body must be a JSON array of operations")
    doc = json_copy(doc)
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _patch_error(f"json patch: operation {i} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise _patch_error(f"json patch: operation {i} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add(doc, path, json_copy(op["value"]))
        elif kind == "replace":
            doc = _add(doc, path, json_copy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise _patch_error(f"json patch: operation {i} ({kind}) needs 'from'")
            value = _remove(doc, op["from"]) if kind == "move" else json_copy(_read(doc, op["from"]))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _read(doc, path) != op["value"]:
                raise _patch_error(f"json patch: test failed at {path!r}")
        else:
            raise _patch_error(f"json patch: unknown op {kind!r} in operation {i}")
    if not isinstance(doc, dict):
        raise _patch_error("json patch: the result must be an object")
    return doc


# --------------------------------------------------------------------------- merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --------------------------------------------------------------------------- strategic merge


def _strip(value: Any) -> Any:
    """A patch value as plain data, with strategic merge directives removed."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def strategic_merge(orig: Any, patch: Any, node: Node) -> Any:
    """Strategic merge patch of orig (a map) with patch, following node's schema."""
    if not isinstance(patch, dict):
        return _strip(patch)
    if not isinstance(orig, dict):
        orig = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise _patch_error(f"strategic merge patch: unknown $patch directive {directive!r}")
    out = dict(orig)
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(value, list):
                out[field] = [v for v in out[field] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        child = node.field(key)
        if isinstance(value, dict):
            merged = strategic_merge(out.get(key), value, child)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _merge_list(out.get(key) if isinstance(out.get(key), list) else [], value, child)
        else:
            out[key] = value
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(orig: list, patch: list, node: Node) -> list:
    key = node.merge_key
    if key:
        if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
            return [_strip(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
        out = list(orig)
        for item in patch:
            if not isinstance(item, dict):
                raise _patch_error(
                    f"strategic merge patch: items of a list merged by {key!r} must be objects"
                )
            index = next(
                (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item.get(key)), None
            )
            if item.get("$patch") == "delete":
                if index is not None:
                    out.pop(index)
            elif index is None:
                out.append(_strip(item))
            else:
                out[index] = strategic_merge(out[index], item, node.items())
        return out
    if node.merges_primitives:
        if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
            return [i for i in patch if not isinstance(i, dict)]
        return list(orig) + [v for v in patch if v not in orig]
    return _strip(patch)
