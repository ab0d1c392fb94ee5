# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One cached Kubernetes client per kubeconfig, so discovery and TLS set-up happen once.

The deploy orchestration talks to many clusters from threads; each cluster gets one
``ClusterClient`` wrapping an ``ApiClient`` and a lazily created ``DynamicClient`` (whose
discovery is cached on disk and resolved once per kind).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError

# The kubernetes client is imported on first use: it costs about half a second, which a run
# that stops at validation (a refused spec, a check of arguments) should not pay.
_KUBERNETES: dict[str, Any] = {}

FIELD_MANAGER = "qonnect"
REQUEST_TIMEOUT = 15.0


class K8sError(QonnectError):
    """A failed Kubernetes call, with the cluster it concerns and the HTTP status (0: no answer)."""

    def __init__(self, cluster: str, message: str, status: int = 0):
        super().__init__(f"{cluster}: {message}")
        self.cluster = cluster
        self.message = message
        self.status = status


def kubernetes() -> dict[str, Any]:
    """The kubernetes client's parts this module uses, imported once; a clear K8sError when the
    package is missing."""
    if not _KUBERNETES:
        try:
            from kubernetes import config as k8s_config
            from kubernetes.client.rest import ApiException
            from kubernetes.dynamic import DynamicClient
            from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
            from kubernetes.dynamic.resource import ResourceList
        except ImportError as exc:
            raise K8sError(
                "-", f"the 'kubernetes' Python package is required (pip install kubernetes): {exc}"
            ) from None
        _KUBERNETES.update(
            config=k8s_config,
            ApiException=ApiException,
            DynamicClient=DynamicClient,
            DynamicApiError=DynamicApiError,
            ResourceNotFoundError=ResourceNotFoundError,
            ResourceList=ResourceList,
        )
    return _KUBERNETES


def require_kubernetes() -> None:
    """Fail clearly when the kubernetes client is missing."""
    kubernetes()


def _error_message(exc: BaseException) -> tuple[str, int]:
    """Turn a client exception into a short message without headers or credentials."""
    status = int(getattr(exc, "status", 0) or 0)
    k8s = _KUBERNETES  # empty until the client was imported: then no exception can be its own
    if k8s and isinstance(exc, k8s["DynamicApiError"]):
        summary = exc.summary()
        if isinstance(summary, bytes):
            summary = summary.decode("utf-8", "replace")
        return f"HTTP {status}: {summary}", status
    if k8s and isinstance(exc, k8s["ApiException"]):
        return f"HTTP {status}: {exc.reason}", status
    text = str(exc).split("\n", 1)[0]
    if "Connection refused" in str(exc) or "NewConnectionError" in str(exc):
        text = "connection refused"
    elif "timed out" in str(exc).lower():
        text = "timed out"
    return f"unreachable ({type(exc).__name__}: {text})", 0


class ClusterClient:
    """Kubernetes API access to one cluster through one kubeconfig (a path, or its content as a
    mapping: k8s/auth.py builds one from K8S_AUTH_* options; content never appears in errors)."""

    def __init__(self, name: str, kubeconfig: str | dict, context: str | None = None):
        k8s_config = kubernetes()["config"]
        self.name = name
        self.kubeconfig = kubeconfig if isinstance(kubeconfig, str) else "<kubeconfig content>"
        try:
            if isinstance(kubeconfig, dict):
                self.api = k8s_config.new_client_from_config_dict(
                    kubeconfig, context=context, persist_config=False
                )
            else:
                self.api = k8s_config.new_client_from_config(
                    config_file=kubeconfig, context=context, persist_config=False
                )
        except Exception as exc:  # bad file, missing context, unreadable CA...
            detail = f": {exc}" if isinstance(kubeconfig, str) else ""  # content may hold a token
            raise K8sError(name, f"cannot load kubeconfig {self.kubeconfig}: {type(exc).__name__}{detail}")
        self._dynamic: Any = None
        self._resources: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _dyn(self) -> Any:
        with self._lock:
            if self._dynamic is None:
                host = self.api.configuration.host.encode()
                cache = os.path.join(
                    tempfile.gettempdir(),
                    f"qonnect-discovery-{hashlib.sha256(host).hexdigest()[:16]}.json",
                )
                self._dynamic = self._call(kubernetes()["DynamicClient"], self.api, cache_file=cache)
            return self._dynamic

    def _call(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except K8sError:
            raise
        except Exception as exc:
            message, status = _error_message(exc)
            raise K8sError(self.name, message, status) from None

    def resource(self, api_version: str, kind: str) -> Any:
        """The discovered API resource for apiVersion/kind (cached per client)."""
        key = (api_version, kind)
        found = self._resources.get(key)
        if found is None:
            dyn = self._dyn()
            try:
                found = dyn.resources.get(api_version=api_version, kind=kind)
            except kubernetes()["ResourceNotFoundError"]:
                raise K8sError(self.name, f"the cluster does not serve {api_version} {kind}", 404) from None
            except Exception as exc:
                message, status = _error_message(exc)
                raise K8sError(self.name, message, status) from None
            self._resources[key] = found
        return found

    def namespaced_kinds(self) -> list[tuple[str, str]]:
        """Every namespaced kind the cluster serves that can be listed, in its preferred version
        (through discovery): removal looks at all of them before it deletes a namespace."""
        found = self._call(self._dyn().resources.search)  # every resource (lists included)
        kinds = {
            (res.group_version, res.kind)
            for res in found
            if not isinstance(res, kubernetes()["ResourceList"])  # the <Kind>List of a kind
            and getattr(res, "preferred", False)
            and getattr(res, "namespaced", False)
            and "list" in (getattr(res, "verbs", None) or [])
            and "/" not in (getattr(res, "name", "") or "")  # not a subresource
        }
        return sorted(kinds)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None when it (or its kind) does not exist."""
        try:
            res = self.resource(api_version, kind)
            obj = self._call(
                self._dyn().get,
                res,
                name=name,
                namespace=namespace,
                serializer=_plain,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except K8sError as exc:
            if exc.status == 404:
                return None
            raise
        return self._json(obj)

    def _json(self, answer: Any) -> dict:
        """The decoded JSON object of an answer (``_plain``), or K8sError when it was not one."""
        if not isinstance(answer, dict):
            raise K8sError(self.name, "the cluster's answer was not a JSON object", 0)
        return answer

    def list_body(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> bytes:
        """A list of a kind as the cluster sent it, undecoded (b"" when the namespace or the
        kind does not exist): a caller that already holds the same items skips decoding them
        (k8s/shared_reads.py)."""
        try:
            res = self.resource(api_version, kind)
            answer = self._call(
                self._dyn().get,
                res,
                namespace=namespace,
                label_selector=label_selector,
                serialize=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except K8sError as exc:
            if exc.status == 404:
                return b""
            raise
        return bytes(answer.data)

    def list_items(self, body: bytes, api_version: str, kind: str) -> list[dict]:
        """The objects of a ``list_body``, each with its apiVersion and kind (list items carry
        none); K8sError when the body is no JSON object."""
        if not body:
            return []
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        items = self._json(decoded).get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """Objects of a kind; empty when the namespace or the kind does not exist."""
        return self.list_items(
            self.list_body(api_version, kind, namespace, label_selector), api_version, kind
        )

    def apply(self, obj: dict, dry_run: bool = False) -> dict:
        """Server-side apply with field manager qonnect (conflicts forced: qonnect owns its fields)."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata") or {}
        kwargs: dict[str, Any] = {
            "body": obj,
            "name": meta.get("name"),
            "namespace": meta.get("namespace") if res.namespaced else None,
            "field_manager": FIELD_MANAGER,
            "force_conflicts": True,
            "_request_timeout": REQUEST_TIMEOUT,
        }
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._call(self._dyn().server_side_apply, res, **kwargs).to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete with background propagation; False when it was already gone."""
        try:
            res = self.resource(api_version, kind)
            self._call(
                self._dyn().delete,
                res,
                name=name,
                namespace=namespace if res.namespaced else None,
                propagation_policy="Background",
                _request_timeout=REQUEST_TIMEOUT,
            )
        except K8sError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _plain(_client: Any, data: Any) -> Any:
    """The dynamic client's serializer for reads: the decoded JSON as it is. Its default builds
    a ResourceInstance and ``to_dict`` turns it back, which cost a self-heal pass over 1,000
    Deployments most of its CPU (issue 38)."""
    return data


class Credentials(Protocol):
    """What reaches one cluster (k8s/deployer.py's ``Target`` is one): named here so the
    client factory needs no import of the deployer, which imports this module."""

    @property
    def name(self) -> str: ...

    @property
    def kubeconfig(self) -> str | dict: ...

    @property
    def context(self) -> str | None: ...


_CLIENTS: dict[tuple[str, str, str | None], ClusterClient] = {}
_CLIENTS_LOCK = threading.Lock()


def get_client(name: str, kubeconfig: str | dict, context: str | None = None) -> ClusterClient:
    """The shared client for a kubeconfig (one per file or content, context and cluster name)."""
    if isinstance(kubeconfig, dict):
        digest = hashlib.sha256(json.dumps(kubeconfig, sort_keys=True, default=str).encode()).hexdigest()
        key = (name, "content:" + digest, context)
    else:
        key = (name, os.path.abspath(os.path.expanduser(kubeconfig)), context)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = ClusterClient(name, kubeconfig if isinstance(kubeconfig, dict) else key[1], context)
            _CLIENTS[key] = client
        return client


def client_of(target: Credentials) -> ClusterClient:
    """The shared client of a cluster's Target: the one factory of the deployer, the deploy
    module and the controller, so each reaches a cluster with the same credentials."""
    return get_client(target.name, target.kubeconfig, target.context)


def raw_get(api: Any, path: str, query: Mapping[str, str], timeout: float) -> bytes:
    """GET ``path`` through an ``ApiClient``'s transport (auth, TLS) without its models.

    The typed APIs (CoreV1Api...) import hundreds of generated model classes, which costs
    seconds of CPU per process; the agent's collector and the controller's own looks at a
    cluster (controller/confirm.py, controller/capacity.py) need raw JSON only. A non-2xx answer
    raises the client's ``ApiException`` (with ``status``); transport errors pass through as the
    client raises them. Recent generated clients split a call into ``param_serialize`` +
    ``call_api``; older ones take everything in ``call_api``.
    """
    headers = {"Accept": "application/json"}
    if hasattr(api, "param_serialize"):
        request = api.param_serialize(
            "GET",
            path,
            query_params=list(query.items()),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        resp = api.call_api(*request, _request_timeout=timeout)
        body = resp.read()
        if not 200 <= resp.status <= 299:
            raise kubernetes()["ApiException"](status=resp.status, reason=resp.reason)
        return body
    resp = api.call_api(
        path,
        "GET",
        query_params=list(query.items()),
        header_params=headers,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
        _request_timeout=timeout,
    )
    return resp.data
