# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which credentials reach each cluster: KB paths, kubeconfig content or K8S_AUTH_* options.

AWX and Automation Controller hand credentials to a job as environment variables and temporary
files (its Kubernetes credential type sets K8S_AUTH_HOST, K8S_AUTH_API_KEY, K8S_AUTH_SSL_CA_CERT,
K8S_AUTH_VERIFY_SSL, as kubernetes.core reads them), not as kubeconfig paths in a KB record. This
module turns every supported form into what ``k8s.client.get_client`` accepts: a kubeconfig path
or a kubeconfig mapping, plus a context.

Precedence for a cluster: ``kubeconfigs.<cluster>`` (path or content), then ``k8s_host`` /
``k8s_api_key`` when they are for this cluster, then ``k8s_kubeconfig`` when it has a context for
the cluster, then the kubeconfig path of the cluster's KB record.
"""

from __future__ import annotations

import os
from typing import Any

try:
    import yaml

    HAS_YAML = True
except ImportError:  # kubeconfig content as a YAML string needs PyYAML (a mapping does not)
    HAS_YAML = False

from ansible.module_utils.basic import env_fallback
from ansible_collections.qonnect.core.plugins.module_utils.k8s.records import record_credentials

K8S_AUTH_ARGSPEC: dict[str, dict[str, Any]] = {
    "k8s_kubeconfig": {"type": "raw", "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_KUBECONFIG"])},
    "k8s_host": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_HOST"])},
    "k8s_api_key": {"type": "str", "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_API_KEY"])},
    "k8s_ca_cert": {
        "type": "path",
        "aliases": ["k8s_ssl_ca_cert"],
        "fallback": (env_fallback, ["K8S_AUTH_SSL_CA_CERT"]),
    },
    "k8s_validate_certs": {
        "type": "bool",
        "aliases": ["k8s_verify_ssl"],
        "fallback": (env_fallback, ["K8S_AUTH_VERIFY_SSL"]),
    },
    "k8s_cluster": {"type": "str", "fallback": (env_fallback, ["QONNECT_K8S_CLUSTER"])},
}


def k8s_auth_argspec() -> dict[str, dict[str, Any]]:
    """A copy of the K8S_AUTH options (doc fragment qonnect.core.k8s_auth)."""
    return {name: dict(opts) for name, opts in K8S_AUTH_ARGSPEC.items()}


def load_kubeconfig(value: Any, where: str) -> str | dict:
    """A kubeconfig path (str without newlines) or content (mapping, or YAML text) -> path or mapping."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and "\n" not in value.strip():
        return value
    if isinstance(value, str):
        if not HAS_YAML:
            raise ValueError(f"{where}: kubeconfig content as text needs PyYAML (pip install PyYAML)")
        try:
            loaded = yaml.safe_load(value)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded
        raise ValueError(f"{where}: not a kubeconfig path and not kubeconfig YAML content")
    raise ValueError(f"{where}: expected a kubeconfig path or kubeconfig content, got {type(value).__name__}")


def token_kubeconfig(
    name: str, host: str, api_key: str | None, ca_cert: str | None, validate_certs: bool | None
) -> dict:
    """A one-context kubeconfig mapping for an API server URL and bearer token."""
    cluster: dict[str, Any] = {"server": host}
    if ca_cert:
        cluster["certificate-authority"] = ca_cert
    if validate_certs is False:
        cluster["insecure-skip-tls-verify"] = True
    user = {"token": api_key} if api_key else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }


def _context_names(contexts: Any) -> set[str]:
    return {c["name"] for c in contexts or [] if isinstance(c, dict) and isinstance(c.get("name"), str)}


def _contexts(kubeconfig: str | dict) -> set[str]:
    if isinstance(kubeconfig, dict):
        return _context_names(kubeconfig.get("contexts"))
    if not HAS_YAML:
        return set()
    try:
        with open(os.path.expanduser(kubeconfig), encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"k8s_kubeconfig: cannot read {kubeconfig}: {type(exc).__name__}") from None
    if not isinstance(loaded, dict):
        raise ValueError(
            f"k8s_kubeconfig: {kubeconfig} is not a kubeconfig (expected a mapping with clusters, "
            f"users and contexts, got a {type(loaded).__name__})"
        )
    return _context_names(loaded.get("contexts"))


def _same_server(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def resolve(names: set[str], records: dict[str, dict], overrides: dict, params: dict) -> dict[str, tuple]:
    """Cluster name -> (kubeconfig path or mapping, context); every cluster without one at once.

    ``records`` are the KB cluster records (all of them: ``k8s_host`` is matched against their
    ``server``). A record without a ``kubeconfig`` key comes from a
    token whose role may not read credentials (reader, agent): the error says so.
    """
    host = params.get("k8s_host")
    token_for = params.get("k8s_cluster") or ""
    matches: list[str] = []
    if host and not token_for:
        matches = sorted(n for n, r in records.items() if _same_server(r.get("server"), host))
        token_for = matches[0] if len(matches) == 1 else ""
    shared = params.get("k8s_kubeconfig")
    shared = load_kubeconfig(shared, "k8s_kubeconfig") if shared else None
    shared_contexts = _contexts(shared) if shared is not None else set()

    out: dict[str, tuple] = {}
    errors: list[str] = []
    for name in sorted(names):
        record = records.get(name, {})
        if overrides.get(name):
            out[name] = (load_kubeconfig(overrides[name], f"kubeconfigs.{name}"), record.get("context"))
        elif host and name == token_for:
            out[name] = (
                token_kubeconfig(
                    name,
                    host,
                    params.get("k8s_api_key"),
                    params.get("k8s_ca_cert"),
                    params.get("k8s_validate_certs"),
                ),
                name,
            )
        elif shared is not None and (record.get("context") or name) in shared_contexts:
            out[name] = (shared, record.get("context") or name)
        elif record.get("kubeconfig"):
            out[name] = record_credentials(record)
        elif record and "kubeconfig" not in record:
            errors.append(
                f"cluster {name}: the KB token may not read kubeconfig paths (reader and agent tokens get "
                f"none): use an admin token, or give kubeconfigs.{name}, k8s_kubeconfig "
                f"(K8S_AUTH_KUBECONFIG) with a context named {record.get('context') or name}, or "
                f"k8s_host/k8s_api_key (K8S_AUTH_HOST/K8S_AUTH_API_KEY) for it"
            )
        else:
            errors.append(
                f"cluster {name}: no kubeconfig (register it with one, or give kubeconfigs.{name}, "
                f"k8s_kubeconfig with a context named {name}, or k8s_host/k8s_api_key for it)"
            )
    if host and not token_for:
        which = f"clusters {', '.join(matches)} have" if matches else "no cluster in the KB has"
        errors.append(
            f"k8s_host {host}: {which} that server; name the cluster with k8s_cluster (QONNECT_K8S_CLUSTER)"
        )
    if errors:
        raise ValueError("; ".join(errors))
    return out
