"""Write testbed/qonnect_testbed/store/served_v1_34.json from a real API server's own discovery.

The emulator serves what this file lists (store/resources.py loads it), so its resource types
are the pinned Kubernetes build's, not a hand-written list. The script starts one cluster of the
testbed's real engine (``qonnect testbed up --engine kube``: kube-apiserver and friends built by
``make kube``), reads /version, /api/v1 and /apis/G/V of every served group-version, and the
OpenAPI v3 schema name of every kind (the emulator validates with kubernetes-validate's copy of
the same upstream schemas: resources.py checks each kind has one), then takes the cluster down.

Usage: .venv/bin/python scripts/generate-served.py [--output PATH]
It never builds Kubernetes: if the binaries are missing it says so and stops (run ``make kube``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "testbed" / "qonnect_testbed" / "store" / "served_v1_34.json"
QONNECT = Path(sys.executable).with_name("qonnect")


def _get(api: client.ApiClient, path: str) -> Any:
    response = api.call_api(
        "GET",
        api.configuration.host + path,
        header_params={
            "Accept": "application/json",
            "Authorization": api.configuration.auth_settings()["BearerToken"]["value"],
        },
    )
    response.read()
    return json.loads(response.data)


def _resources(doc: dict, group: str, version: str, preferred: str, schemas: dict) -> list[dict]:
    """One entry per resource of a group-version, its subresources folded in."""
    subs: dict[str, list[dict]] = {}
    for r in doc["resources"]:
        if "/" in r["name"]:
            plural, sub = r["name"].split("/", 1)
            entry = {"name": sub, "kind": r["kind"], "verbs": sorted(r.get("verbs") or [])}
            if r.get("group") is not None or r.get("version"):
                entry["group"] = r.get("group", group)
                entry["version"] = r.get("version", version)
            subs.setdefault(plural, []).append(entry)
    out = []
    for r in doc["resources"]:
        if "/" in r["name"]:
            continue
        out.append(
            {
                "group": group,
                "version": version,
                "preferred": version == preferred,
                "plural": r["name"],
                "singular": r.get("singularName") or r["kind"].lower(),
                "kind": r["kind"],
                "namespaced": bool(r["namespaced"]),
                "shortNames": r.get("shortNames") or [],
                "verbs": sorted(r.get("verbs") or []),
                "categories": r.get("categories") or [],
                "subresources": sorted(subs.get(r["name"], []), key=lambda s: s["name"]),
                "schema": schemas.get((group, version, r["kind"]), ""),
            }
        )
    return out


def _schemas(api: client.ApiClient) -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> the OpenAPI v3 schema name the real server documents it by."""
    out: dict[tuple[str, str, str], str] = {}
    for path in _get(api, "/openapi/v3")["paths"]:
        if not path.startswith(("api/", "apis/")) or path.count("/") < 1:
            continue
        doc = _get(api, "/openapi/v3/" + path)
        for name, schema in (doc.get("components") or {}).get("schemas", {}).items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or ():
                key = (gvk.get("group", ""), gvk["version"], gvk["kind"])
                if not name.endswith("List") or gvk["kind"].endswith("List"):
                    out.setdefault(key, name)
    return out


def collect(kubeconfig: str) -> dict:
    """The served-resources document of the API server behind kubeconfig."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        version = _get(api, "/version")
        schemas = _schemas(api)
        resources = _resources(_get(api, "/api/v1"), "", "v1", "v1", schemas)
        for group in _get(api, "/apis")["groups"]:
            preferred = group["preferredVersion"]["version"]
            for v in group["versions"]:
                doc = _get(api, f"/apis/{v['groupVersion']}")
                resources += _resources(doc, group["name"], v["version"], preferred, schemas)
    return {
        "generatedBy": "scripts/generate-served.py",
        "gitVersion": version["gitVersion"],
        "resources": resources,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "testbed"))
    from qonnect_testbed.kube import binaries

    absent = binaries.missing()
    if absent:
        print(
            f"generate-served: {binaries.bin_dir()} lacks {', '.join(absent)}; build them with 'make kube'",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="qonnect-served-") as tmp:
        up = [str(QONNECT), "testbed", "up", "--dir", tmp, "--engine", "kube", "--profile", "tiers"]
        up += ["--clusters", "1", "--timeout", "300"]
        try:
            subprocess.run(up, check=True, capture_output=True, text=True, timeout=420)
            fed = yaml.safe_load((Path(tmp) / "federation.yaml").read_text())
            doc = collect(str(fed["clusters"][0]["kubeconfig"]))
        except subprocess.CalledProcessError as exc:
            print(f"generate-served: 'qonnect testbed up' failed:\n{exc.stderr[-3000:]}", file=sys.stderr)
            return 1
        finally:
            subprocess.run(
                [str(QONNECT), "testbed", "down", "--dir", tmp], capture_output=True, timeout=120, check=False
            )
    args.output.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"generate-served: {len(doc['resources'])} resources of {doc['gitVersion']} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
