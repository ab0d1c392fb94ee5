# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Inventory of the federation's clusters, read from the qonnect Knowledge Base."""

from __future__ import annotations

DOCUMENTATION = r"""
name: kb
short_description: Clusters of a qonnect federation from its Knowledge Base
version_added: 0.1.0
description:
  - Makes each cluster registered in the qonnect Knowledge Base a host, with its tier, location, labels,
    API server, kubeconfig, capacity, free resources, energy, price, health, heartbeat age and the
    applications placed on it as host variables.
  - Groups clusters by tier (V(cloud), V(fog), V(edge)), by health (V(healthy), V(unhealthy)), by label
    (C(label_<key>_<value>)) and by application (C(app_<name>)); more with O(keyed_groups) and O(groups).
  - Hosts get C(ansible_connection=local), because a play acts on a cluster through its API, not by logging in,
    and C(ansible_python_interpreter) set to the Python running Ansible (see O(python_interpreter)), so
    modules that need the collection's Python requirements find them also in plays on a group such as V(fog).
  - The inventory file name must end in C(qonnect.yml) or C(qonnect.yaml).
  - When the Knowledge Base cannot be reached, Ansible by default only warns and goes on with an empty
    inventory. Set E(ANSIBLE_INVENTORY_UNPARSED_FAILED=true) (C(unparsed_is_failed) in the C([inventory])
    section of C(ansible.cfg)) to make that an error, for example in the environment variables of an AWX
    inventory source.
  - With O(cache=true) the cache key includes the O(url) and a hash of the O(token), so another KB or
    another token never reads a cached inventory it did not fetch; the token itself is never stored.
author:
  - qonnect.core developers (@qonnect)
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: Marks this file as an inventory of this plugin.
    required: true
    choices: [qonnect.core.kb]
    type: str
  url:
    description:
      - Base URL of the Knowledge Base, for example V(https://kb.example.org:8443).
      - May be a Jinja2 template, for example one that reads another environment variable (see the examples).
    type: str
    env:
      - name: QONNECT_KB_URL
  token:
    description:
      - Bearer token for the Knowledge Base (a reader token is enough; with a reader token the
        C(kubeconfig) host variable is not available). May be a template. Never shown.
    type: str
    env:
      - name: QONNECT_KB_TOKEN
  ca_path:
    description:
      - Path of a PEM CA bundle to verify the Knowledge Base's TLS certificate. An empty value means none.
    type: str
    env:
      - name: QONNECT_KB_CA_PATH
  validate_certs:
    description:
      - Whether to verify the Knowledge Base's TLS certificate. Verified when not set.
      - Read as the modules read O(qonnect.core.deploy#module:kb_validate_certs) - V(true)/V(false),
        V(yes)/V(no), V(on)/V(off), V(1)/V(0); an empty or any other value is an error naming it, never
        a silent V(false).
    type: raw
    env:
      - name: QONNECT_KB_VALIDATE_CERTS
  timeout:
    description: Timeout in seconds of each request to the Knowledge Base.
    type: float
    default: 10.0
  include_unhealthy:
    description: Also list clusters whose agent has not reported within the KB's heartbeat timeout.
    type: bool
    default: true
  python_interpreter:
    description:
      - The C(ansible_python_interpreter) of every host.
      - Default is the Python that runs Ansible (and this plugin), which has the collection's requirements.
      - V(auto) or V(auto_silent) lets Ansible discover an interpreter instead.
    type: str
    env:
      - name: QONNECT_INVENTORY_PYTHON_INTERPRETER
"""

EXAMPLES = r"""
# federation.qonnect.yml
plugin: qonnect.core.kb
url: http://127.0.0.1:8080
# token from QONNECT_KB_TOKEN, CA bundle from QONNECT_KB_CA_PATH
keyed_groups:
  - key: labels.region | default('none')
    prefix: region
compose:
  cheap: price_eur_h < 1
groups:
  green: energy_kwh is not none and energy_kwh < 0.0025

# ansible-inventory -i federation.qonnect.yml --graph
---
# another.qonnect.yml: URL from another variable, cached for ten minutes per URL and token
plugin: qonnect.core.kb
url: "{{ lookup('ansible.builtin.env', 'MY_KB_URL') }}"
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/qonnect-inventory
cache_timeout: 600
"""

import hashlib
import os
import sys
from typing import Any

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible_collections.qonnect.core.plugins.module_utils.booleans import option_or_env
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import InventoryError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    RESOURCES,
    free_capacity,
)

ENV_VALIDATE_CERTS = "QONNECT_KB_VALIDATE_CERTS"


def _sum(nodes: list[dict], field: str) -> dict[str, float]:
    return {r: sum((n.get(field) or {}).get(r, 0) or 0 for n in nodes) for r in RESOURCES}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _registered_nodes(record: dict) -> dict[str, dict]:
    """The nodes the admin's registration names, each with its economics (the cluster's
    default where a node leaves one out): one the agent stops reporting still counts."""
    per_node = record.get("node_economics") or {}
    default = record.get("economics") or {}
    if not isinstance(per_node, dict) or not isinstance(default, dict):
        return {}
    keys = ("price_eur_h", "energy_kwh", "bandwidth_gbps")
    return {
        name: {k: own.get(k) if own.get(k) is not None else default.get(k) for k in keys}
        for name, own in per_node.items()
        if isinstance(own, dict)
    }


def cluster_vars(
    cluster: dict, record: dict, applications: list[str], interpreter: str | None = None
) -> dict[str, Any]:
    """Host variables of one cluster from its inventory entry and its cluster record."""
    nodes = cluster.get("nodes") or []
    usable = [n for n in nodes if n.get("ready") and n.get("schedulable", True)]
    # economics from the registration's nodes when it names them (an agent chooses which nodes
    # it reports: dropping an expensive one or inventing a cheap one must not make it "cheap")
    reported = {n.get("name") for n in nodes}
    priced = nodes + [n for name, n in _registered_nodes(record).items() if name not in reported]
    prices = [n["price_eur_h"] for n in priced if n.get("price_eur_h") is not None]
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": interpreter or sys.executable,
        "qonnect_cluster": cluster["name"],
        "tier": cluster.get("tier"),
        "location": cluster.get("location"),
        "labels": dict(cluster.get("labels") or {}),
        "server": record.get("server"),
        "kubeconfig": record.get("kubeconfig"),
        "capacity": _sum(nodes, "allocatable"),
        "free": free_capacity(cluster),
        "nodes": [n.get("name") for n in nodes],
        "ready_nodes": len(usable),
        "energy_kwh": _mean([n["energy_kwh"] for n in priced if n.get("energy_kwh") is not None]),
        "price_eur_h": sum(prices) if prices else None,
        "bandwidth_gbps": _mean([n["bandwidth_gbps"] for n in priced if n.get("bandwidth_gbps") is not None]),
        "healthy": bool(cluster.get("healthy")),
        "heartbeat_age": cluster.get("heartbeat_age"),
        "applications": applications,
    }


def applications_by_cluster(placements: dict) -> dict[str, list[str]]:
    """cluster -> applications placed there, from the KB inventory's placements (which already
    hold each application's ``current_placement``)."""
    out: dict[str, set[str]] = {}
    for app, services in (placements or {}).items():
        for entries in (services or {}).values():
            for entry in entries or []:
                out.setdefault(entry.get("cluster"), set()).add(app)
    return {cluster: sorted(apps) for cluster, apps in out.items()}


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """qonnect.core.kb: one host per cluster of the Knowledge Base."""

    NAME = "qonnect.core.kb"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith(("qonnect.yml", "qonnect.yaml"))

    def _option(self, name: str) -> Any:
        value = self.get_option(name)
        if isinstance(value, str) and "{{" in value:
            value = self.templar.template(value)
        return value

    def _connection(self) -> tuple[str, str | None]:
        """The templated URL and token; the URL is required."""
        url = self._option("url")
        if not url:
            raise AnsibleParserError("qonnect.core.kb: option 'url' (or QONNECT_KB_URL) is required")
        return url, self._option("token")

    def cache_key(self, path: str) -> str:
        """Per inventory file, KB URL and token: a different KB or token never reads this entry.

        Only a hash of the token is part of the key (cache plugins write keys to disk as names).
        """
        url, token = self._connection()
        token_id = hashlib.sha256((token or "").encode()).hexdigest()
        ident = hashlib.sha256(f"{url}\0{token_id}".encode()).hexdigest()[:16]
        return f"{self.get_cache_key(path)}_{ident}"

    def _validate_certs(self) -> bool:
        """validate_certs by the modules' parser (booleans.py): unset verifies, a bad value is an
        error naming where it came from (the option or QONNECT_KB_VALIDATE_CERTS)."""
        value, origin = self.get_option_and_origin("validate_certs")
        name = ENV_VALIDATE_CERTS if str(origin).startswith("env") else "validate_certs"
        try:
            return option_or_env(value, name, ENV_VALIDATE_CERTS, True, environ={})
        except InputError as exc:
            raise AnsibleParserError(f"qonnect.core.kb: {exc}") from None

    def fetch(self) -> dict[str, Any]:
        url, token = self._connection()
        try:
            client = KBClient(
                url,
                token,
                ca_path=os.path.expanduser(self.get_option("ca_path") or "") or None,
                validate_certs=self._validate_certs(),
                timeout=self.get_option("timeout"),
            )
            inventory = client.inventory()
            records = client.list_clusters()
        except KBError as exc:
            raise AnsibleParserError(f"qonnect.core.kb: {exc}") from None
        return {"inventory": inventory, "records": {r["name"]: r for r in records}}

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        key = self.cache_key(path)
        use_cache = self.get_option("cache") and cache
        data = None
        if use_cache:
            try:
                data = self._cache[key]
            except KeyError:
                data = None
        if data is None:
            data = self.fetch()
            if self.get_option("cache"):
                self._cache[key] = data
        self.populate(data)

    def _group(self, name: str) -> str:
        group = self._sanitize_group_name(name)
        self.inventory.add_group(group)
        return group

    def populate(self, data: dict[str, Any]) -> None:
        inventory = data["inventory"]
        apps = applications_by_cluster(inventory.get("placements") or {})
        strict = self.get_option("strict")
        interpreter = self.get_option("python_interpreter") or sys.executable
        for group in ("cloud", "fog", "edge", "healthy", "unhealthy"):
            self._group(group)
        for cluster in inventory.get("clusters") or []:
            if not cluster.get("healthy") and not self.get_option("include_unhealthy"):
                continue
            name = cluster["name"]
            try:
                hostvars = cluster_vars(
                    cluster, data["records"].get(name, {}), apps.get(name, []), interpreter
                )
            except InventoryError as exc:
                raise AnsibleParserError(f"qonnect.core.kb: the KB's inventory: {exc}") from None
            self.inventory.add_host(name)
            for var, value in hostvars.items():
                self.inventory.set_variable(name, var, value)
            if hostvars["tier"]:
                self.inventory.add_child(self._group(hostvars["tier"]), name)
            self.inventory.add_child("healthy" if hostvars["healthy"] else "unhealthy", name)
            for label, value in sorted(hostvars["labels"].items()):
                self.inventory.add_child(self._group(f"label_{label}_{value}"), name)
            for app in hostvars["applications"]:
                self.inventory.add_child(self._group(f"app_{app}"), name)
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
