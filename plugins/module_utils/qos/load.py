# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loading a QoS spec: read it (spec_yaml), pick the reader for its apiVersion, return the model."""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import spec_yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import typename
from ansible_collections.qonnect.core.plugins.module_utils.qos.manifests import Clusters
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import (
    API_VERSION,
    Application,
    QosSpecError,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.native import NativeReader
from ansible_collections.qonnect.core.plugins.module_utils.qos.qonnect_format import (
    QONNECT_API_VERSION,
    QonnectReader,
)
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import MAX_FILE_BYTES, SpecYamlError


def load_application_file(
    path: str, bundles: dict[str, str] | None = None, clusters: Clusters = None
) -> Application:
    """Load a spec file; manifests given by file are resolved relative to the spec's folder.

    ``bundles`` maps QONNECT's tier keys (cloud_svc, fog_svc, edge_svc) to manifest files, as
    QONNECT's API receives them beside the Application file; ``clusters`` (the inventory's)
    are what Helm charts are rendered for (``load_application``).
    """
    try:
        text = spec_yaml.read_bounded(path, what="spec")
    except SpecYamlError as exc:
        raise QosSpecError(exc.errors) from None
    return load_application(
        text, base_dir=os.path.dirname(os.path.abspath(path)), source=path, bundles=bundles, clusters=clusters
    )


def read_spec(data: Any, source: str) -> tuple[Any, list[str]]:
    """A spec as data plus the duplicate-key errors of its YAML; QosSpecError when unreadable."""
    try:
        if isinstance(data, (bytes, bytearray)):
            if len(data) > MAX_FILE_BYTES:
                raise SpecYamlError([f"{source}: larger than the limit of {MAX_FILE_BYTES} bytes"])
            data = spec_yaml.decode(bytes(data), source)
        if isinstance(data, str):
            docs, duplicates = spec_yaml.load(data, source)
            return (docs[0] if docs else None), duplicates
        spec_yaml.check_tree(data)
    except SpecYamlError as exc:
        raise QosSpecError(exc.errors) from None
    return data, []


def load_application(
    data: dict | str,
    base_dir: str | None = None,
    source: str | None = None,
    bundles: dict[str, str] | None = None,
    clusters: Clusters = None,
) -> Application:
    """Validate a spec (dict or YAML text) and return the normalised :class:`Application`.

    ``clusters``: the inventory's cluster entries (or a callable giving them, asked only when a
    chart is rendered); Helm charts are rendered for their ``kube_version``/``api_versions``
    (qos/manifests.py). None: Helm's own defaults."""
    base_dir = base_dir or os.getcwd()
    data, duplicates = read_spec(data, source or "<spec>")
    if not isinstance(data, dict):
        raise QosSpecError(
            [
                *duplicates,
                f"{source or '<spec>'}: expected a mapping (the Application), got {typename(data)}",
            ]
        )
    api = data.get("apiVersion")
    reader: NativeReader | QonnectReader
    reader = QonnectReader(base_dir) if api == QONNECT_API_VERSION else NativeReader(base_dir, clusters)
    reader.errors.extend(duplicates)
    try:
        if isinstance(reader, QonnectReader):
            return reader.read(data, bundles or {})
        if bundles:
            reader.err(
                "bundles", f"tier bundles are only for QONNECT's format (apiVersion {QONNECT_API_VERSION})"
            )
        if api == API_VERSION:
            return reader.read(data)
    except SpecYamlError as exc:  # a limit hit while reading a manifest: stop, with the rest
        raise QosSpecError(reader.errors + exc.errors) from None
    except RecursionError:  # pragma: no cover - depth is bounded before; a last guard
        raise QosSpecError([*reader.errors, "spec: nested too deeply"]) from None
    raise QosSpecError(
        [*reader.errors, f"apiVersion: {api!r} is not one of {API_VERSION}, {QONNECT_API_VERSION}"]
    )
