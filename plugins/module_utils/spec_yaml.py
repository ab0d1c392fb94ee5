# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one YAML reader for QoS specs and their manifests: bounded, strict, never a traceback.

Why its own module: PyYAML's ``safe_load`` accepts duplicate keys (last wins, silently changing
a placement), expands alias bombs into gigabytes, recurses until RecursionError on deep nesting
and reads whatever size it is given. Here every limit is checked before the work it protects:

* a file is read through :func:`read_bounded` (at most ``MAX_FILE_BYTES + 1`` bytes, strict
  UTF-8), so ``/dev/zero`` or a 50 MiB file stops at once;
* the event stream is scanned first (flat, no recursion) for nesting depth and alias count;
* the composed node graph is measured with aliases expanded (memoised, cycle-safe) before any
  Python object is built, and duplicate keys are reported with their path and line;
* mappings and lists given directly (a module's ``spec`` option, a KB request) pass
  :func:`check_tree` with the same depth and size limits.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError

try:
    import yaml

    _Loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
except ImportError:  # pragma: no cover - exercised only without PyYAML
    yaml = None  # type: ignore[assignment]  # optional dependency
    _Loader = None

MAX_FILE_BYTES = 4 * 2**20  # one spec or manifest file, or one inline YAML text
MAX_TOTAL_BYTES = 8 * 2**20  # all files read for one spec together
MAX_DEPTH = 64  # nesting of mappings and lists (aliases expanded)
MAX_ALIASES = 256  # alias references (*name) in one file
MAX_NODES = 100_000  # scalars, mappings and lists in one file, aliases expanded
MAX_DOCUMENTS = 250  # YAML documents in one file (one object each)

LIMITS = {
    "file_bytes": MAX_FILE_BYTES,
    "total_bytes": MAX_TOTAL_BYTES,
    "depth": MAX_DEPTH,
    "aliases": MAX_ALIASES,
    "nodes": MAX_NODES,
    "documents": MAX_DOCUMENTS,
}


class SpecYamlError(QonnectError, ValueError):
    """Input that cannot be read safely; ``errors`` holds 'path: problem' strings."""

    def __init__(self, errors: list[str], detail: str = ""):
        self.errors = list(errors)
        self.detail = detail or "; ".join(self.errors)  # the problem without the file name
        super().__init__("; ".join(self.errors))


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


def read_bounded(path: str, limit: int = MAX_FILE_BYTES, what: str = "file") -> str:
    """The text of a file, reading at most limit+1 bytes; SpecYamlError names the problem."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        detail = f"cannot read the {what}: {exc.strerror or exc}"
        raise SpecYamlError([f"{path}: {detail}"], detail) from None
    if len(data) > limit:
        detail = f"the {what} is larger than the limit of {_size(limit)}"
        raise SpecYamlError([f"{path}: {detail}"], detail)
    return decode(data, path)


def decode(data: bytes, source: str) -> str:
    """Strict UTF-8 (a BOM is allowed); the error gives the offset of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        detail = f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start})"
        raise SpecYamlError([f"{source}: {detail}"], detail) from None


def _mark(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "unknown line"


def yaml_error(exc: Exception, source: str) -> str:
    """A PyYAML error as 'source:line:column: YAML syntax error: problem'."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"{source}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {problem}"
    return f"{source}: YAML syntax error: {problem}"


def _scan(text: str, source: str) -> None:
    """Depth and alias count from the flat event stream, before anything is composed."""
    loader = _Loader(text)
    depth = aliases = events = documents = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            events += 1
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > MAX_DOCUMENTS:
                    raise SpecYamlError(
                        [
                            f"{source}:{_mark(event)}: more than the limit of "
                            f"{MAX_DOCUMENTS} YAML documents (objects)"
                        ]
                    )
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise SpecYamlError(
                        [f"{source}:{_mark(event)}: nested deeper than the limit of {MAX_DEPTH} levels"]
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise SpecYamlError(
                        [f"{source}:{_mark(event)}: more than the limit of {MAX_ALIASES} aliases"]
                    )
            if events > MAX_NODES:
                raise SpecYamlError(
                    [f"{source}:{_mark(event)}: more than the limit of {MAX_NODES} YAML nodes"]
                )
    finally:
        loader.dispose()


def _children(node: Any, path: str) -> list[tuple[Any, str]]:
    if isinstance(node, yaml.MappingNode):
        out = []
        for key, value in node.value:
            label = key.value if isinstance(key, yaml.ScalarNode) else "<key>"
            out.append((key, f"{path}.<key>"))
            out.append((value, f"{path}.{label}" if path else str(label)))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
    return []


def _measure(root: Any, source: str, path: str) -> list[str]:
    """Expanded size and depth of a node graph (iterative, memoised); duplicate keys found.

    Raises SpecYamlError past a limit or on a recursive alias; returns the duplicate-key errors.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    duplicates: list[str] = []
    on_stack: set[int] = set()
    stack: list[tuple[Any, str, bool]] = [(root, path, False)]
    while stack:
        node, where, done = stack.pop()
        key = id(node)
        if done:
            kids = [child for child, _path in _children(node, where)]
            size[key] = 1 + sum(size[id(c)] for c in kids)
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            on_stack.discard(key)
            if size[key] > MAX_NODES:
                raise SpecYamlError(
                    [
                        f"{source}: {where or 'document'} expands to more than the "
                        f"limit of {MAX_NODES} YAML nodes (alias bomb?)"
                    ]
                )
            if height[key] > MAX_DEPTH + 1:
                raise SpecYamlError(
                    [
                        f"{source}: {where or 'document'} is nested deeper than the "
                        f"limit of {MAX_DEPTH} levels (through aliases)"
                    ]
                )
            continue
        if key in size:
            continue
        if key in on_stack:
            raise SpecYamlError(
                [f"{source}: {where or 'document'}: a recursive alias ({_mark(node)}) is not allowed"]
            )
        on_stack.add(key)
        stack.append((node, where, True))
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for k, _v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        label = f"{where}.{k.value}" if where else str(k.value)
                        duplicates.append(
                            f"{label}: duplicate key ({source} {_mark(k)}; first at {_mark(seen[k.value])})"
                        )
                    else:
                        seen[k.value] = k
        for child, child_path in reversed(_children(node, where)):
            if id(child) not in size:
                stack.append((child, child_path, False))
    return duplicates


def load(text: str, source: str, path: str = "", multi: bool = False) -> tuple[list[Any], list[str]]:
    """Parse YAML text: (documents, duplicate-key errors). SpecYamlError for anything fatal.

    ``path`` prefixes the duplicate-key paths (e.g. the spec field that named the file); with
    ``multi`` every document is returned (manifest files), else exactly one (a spec).
    """
    if yaml is None:
        raise SpecYamlError(["PyYAML is required to read YAML: install it with 'pip install PyYAML'"])
    if len(text) > MAX_FILE_BYTES and len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SpecYamlError([f"{source}: larger than the limit of {_size(MAX_FILE_BYTES)}"])
    try:
        _scan(text, source)
        loader = _Loader(text)
        try:
            docs: list[Any] = []
            errors: list[str] = []
            index = 0
            while loader.check_node():
                node = loader.get_node()
                index += 1
                where = f"{path}[document {index}]" if multi and path else path
                errors += _measure(node, source, where)
                docs.append(loader.construct_document(node))
                if not multi and loader.check_node():
                    raise SpecYamlError([f"{source}: expected one YAML document, found several"])
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise SpecYamlError([yaml_error(exc, source)]) from None
    except RecursionError:
        raise SpecYamlError([f"{source}: nested too deeply"]) from None
    return docs, errors


def check_tree(data: Any, path: str = "") -> None:
    """Depth and size limits for a mapping/list given directly (no YAML); SpecYamlError if over."""
    stack: list[tuple[Any, int, str]] = [(data, 0, path)]
    count = 0
    while stack:
        value, depth, where = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise SpecYamlError([f"{path or 'spec'}: more than {MAX_NODES} values"])
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise SpecYamlError(
                    [f"{where or 'spec'}: nested deeper than the limit of {MAX_DEPTH} levels"]
                )
            if isinstance(value, dict):
                stack.extend((v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in value.items())
            else:
                stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value))
