"""Validation of application specs submitted to the KB, through the collection's QoS module.

The KB only accepts self-contained specs: a manifest given as a file path would make the KB
read files on its own host on behalf of a remote caller, so such references are refused and
clients inline the manifests before sending (``qos.load_application`` does the rest).
"""

from __future__ import annotations

import json
import logging
import tempfile
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import qos

from qonnect.kb.jsonsafe import storable_problems

log = logging.getLogger(__name__)
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


class SpecError(Exception):
    """The spec cannot be stored; ``errors`` lists 'path: problem' strings."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _file_references(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, dict):
        if set(value) == {"file"}:
            out.append(
                f"{path or 'spec'}: manifest file references are not accepted by the KB; inline the manifests"
            )
            return
        for key, item in value.items():
            _file_references(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _file_references(item, f"{path}[{i}]", out)


def _bundle_paths(spec: dict[str, Any], out: list[str]) -> None:
    """QONNECT's format also takes a bare file path as a tier bundle."""
    inner = spec.get("spec")
    inner = inner if isinstance(inner, dict) else {}
    for where, holder in (("spec.", inner), ("", spec)):
        for key, _tier in qos.QONNECT_BUNDLES:
            raw = holder.get(key)
            if isinstance(raw, str) and "\n" not in raw.strip() and raw.strip().endswith(_FILE_SUFFIXES):
                out.append(
                    f"{where}{key}: manifest file paths are not accepted by the KB; inline the manifests"
                )


def validate(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Return the normalised Application as a dict, or raise SpecError."""
    problems = storable_problems(spec)
    if problems:  # checked first: nothing below may see a value it cannot store or return
        raise SpecError(problems)
    _file_references(spec, "", problems)
    _bundle_paths(spec, problems)
    if problems:
        raise SpecError(problems)
    with tempfile.TemporaryDirectory(prefix="qkb-spec-") as empty:
        try:
            app = qos.load_application(spec, base_dir=empty)
            if app.name != name:
                raise SpecError([f"metadata.name: {app.name!r} does not match the name in the URL {name!r}"])
            normalized = app.to_dict()
            problems = storable_problems(normalized, "application")
            json.dumps(normalized, allow_nan=False)
        except qos.QosSpecError as exc:
            raise SpecError(list(exc.errors)) from None
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError, UnicodeError) as exc:
            log.warning("the QoS validator failed on a spec for %r: %r", name, exc)
            raise SpecError([f"spec: cannot be validated ({type(exc).__name__})"]) from None
    if problems:
        raise SpecError(problems)
    return normalized
