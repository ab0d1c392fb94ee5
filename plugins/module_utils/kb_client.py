# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Client of the qonnect Knowledge Base HTTP API, using only the standard library.

Modules, the inventory plugin, the Resource Agent, the controller and the CLI all talk to the KB
through this one class, so errors read the same everywhere. The bearer token is never logged,
never put in an exception message and never shown by ``repr``.
"""

from __future__ import annotations

import copy
import http.client
import json
import select
import ssl
import threading
import urllib.parse
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError

API = "/api/v1"
MAX_IDLE = 4  # idle keep-alive connections kept per client (one per concurrent caller)
# the server closed a kept-alive connection without answering: retry once on a new one
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class KBError(QonnectError):
    """A failed KB call: ``status`` is the HTTP status, 0 when the KB could not be reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"KB error {status}: {message}" if status else f"KB unreachable: {message}")
        self.status = status
        self.message = message


def _quote(segment: str) -> str:
    if not isinstance(segment, str) or not segment:
        raise KBError(400, f"expected a non-empty name, got {segment!r}")
    return urllib.parse.quote(segment, safe="")


def _dropped(sock: Any) -> bool:
    """True when an idle keep-alive socket was closed by the server (it turned readable)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _detail(raw: bytes) -> str:
    """The KB's error message (its JSON ``detail``), or the raw text if the body is not JSON."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500] or "no error message"
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):  # FastAPI-style validation errors
            parts = []
            for item in detail:
                if isinstance(item, dict):
                    loc = ".".join(str(p) for p in item.get("loc", []))
                    parts.append(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg", item)))
                else:
                    parts.append(str(item))
            return "; ".join(parts)
        return json.dumps(detail)
    return text[:500]


class KBClient:
    """Synchronous KB client; one instance may be reused for many calls, also from many threads.

    Connections are kept alive between calls (at most ``MAX_IDLE`` idle ones), so a caller that
    reports every few seconds pays for one TCP and TLS handshake, not one per call.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        ca_path: str | None = None,
        validate_certs: bool = True,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise KBError(0, f"kb_url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = float(timeout)
        self._ssl: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            if validate_certs:
                try:
                    self._ssl = ssl.create_default_context(cafile=ca_path)
                except (OSError, ssl.SSLError) as exc:
                    raise KBError(0, f"cannot load CA bundle kb_ca_path={ca_path!r}: {exc}") from None
            else:
                self._ssl = ssl.create_default_context()
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        parts = urllib.parse.urlsplit(self.url)
        try:
            self._port = parts.port
        except ValueError:
            raise KBError(0, f"kb_url has an invalid port: {url!r}") from None
        self._host = parts.hostname or ""
        self._base = parts.path
        # keep-alive connections, reused across calls: no TCP/TLS handshake per request
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KBClient(url={self.url!r}, token={'***' if self._token else None})"

    # -- transport -------------------------------------------------------------------------
    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection still open (reused=True), or a new one."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.sock is not None and not _dropped(conn.sock):
                    return conn, True
                conn.close()
        if self._ssl is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._ssl
            ), False
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if conn.sock is not None and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the kept-alive connections (the client stays usable)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _send(
        self, method: str, target: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One request on a kept-alive connection: (status, body)."""
        while True:
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=data, headers=headers)
                with conn.getresponse() as resp:
                    raw = resp.read()
                    status = resp.status
            except STALE:
                conn.close()
                if reused:  # the server closed it while idle: once more on a new connection
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            self._release(conn)
            return status, raw

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON body (None for 204) or raise KBError."""
        target = self._base + (path if path.startswith("/") else "/" + path)
        if params:
            query = {k: v for k, v in params.items() if v is not None}
            if query:
                target += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            try:
                data = json.dumps(body).encode()
            except (TypeError, ValueError) as exc:
                raise KBError(400, f"request body is not JSON-serialisable: {exc}") from None
            headers["Content-Type"] = "application/json"
        try:
            status, raw = self._send(method.upper(), target, data, headers)
        except TimeoutError:
            raise KBError(0, f"{self.url}: timed out after {self.timeout:g} s") from None
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, bad TLS...
            raise KBError(0, f"{self.url}: {exc}") from None
        if not 200 <= status <= 299:
            raise KBError(status, _detail(raw))
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise KBError(502, f"KB answered {method} {path} with a body that is not JSON") from None

    # -- clusters --------------------------------------------------------------------------
    def list_clusters(self) -> list[dict[str, Any]]:
        return self.request("GET", f"{API}/clusters")["clusters"]

    def get_cluster(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"{API}/clusters/{_quote(name)}")

    def register_cluster(self, cluster: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"{API}/clusters", cluster)

    def update_cluster(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"{API}/clusters/{_quote(name)}", changes)

    def delete_cluster(self, name: str) -> None:
        self.request("DELETE", f"{API}/clusters/{_quote(name)}")

    def list_nodes(self, cluster: str) -> list[dict[str, Any]]:
        return self.request("GET", f"{API}/clusters/{_quote(cluster)}/nodes")["nodes"]

    def report(self, cluster: str, report: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"{API}/clusters/{_quote(cluster)}/reports", report)

    def list_workloads(
        self, application: str | None = None, cluster: str | None = None
    ) -> list[dict[str, Any]]:
        params = {"application": application, "cluster": cluster}
        return self.request("GET", f"{API}/workloads", params=params)["workloads"]

    def latency(self) -> dict[str, dict[str, float]]:
        return self.request("GET", f"{API}/latency")["latency_ms"]

    # -- applications ----------------------------------------------------------------------
    def list_applications(self) -> list[dict[str, Any]]:
        return self.request("GET", f"{API}/applications")["applications"]

    def get_application(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"{API}/applications/{_quote(name)}")

    def put_application(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", f"{API}/applications/{_quote(name)}", spec)

    def delete_application(self, name: str) -> None:
        self.request("DELETE", f"{API}/applications/{_quote(name)}")

    def application_versions(self, name: str) -> list[dict[str, Any]]:
        return self.request("GET", f"{API}/applications/{_quote(name)}/versions")["versions"]

    def roll_back(
        self, name: str, failing: int, restores: int, reason: str, fencing: dict[str, int] | None = None
    ) -> dict[str, Any]:
        """Store version ``restores``'s spec again as the newest, while ``failing`` is current."""
        body: dict[str, Any] = {"failing": failing, "restores": restores, "reason": reason}
        if fencing is not None:
            body["fencing"] = {"term": int(fencing["term"]), "seq": int(fencing["seq"])}
        return self.request("POST", f"{API}/applications/{_quote(name)}/rollback", body)

    def record_history(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """Record placement changes ``{version, trigger, outcome, started, ended, changes: [{service,
        from, to}], ...}`` of an application (a deploy's or a controller run's)."""
        return self.request("POST", f"{API}/applications/{_quote(name)}/history", record)

    def history(self, name: str, limit: int = 50, before: int | None = None) -> dict[str, Any]:
        """A page of the application's placement changes, newest first (``next``: the next page)."""
        params = {"limit": limit, "before": before}
        return self.request("GET", f"{API}/applications/{_quote(name)}/history", params=params)

    # -- placements ------------------------------------------------------------------------
    def get_placement(self, app: str) -> dict[str, Any]:
        return self.request("GET", f"{API}/placements/{_quote(app)}")

    def put_placement(
        self, app: str, placement: dict[str, Any], fencing: dict[str, int] | None = None
    ) -> dict[str, Any]:
        """Write ``{"desired": ..., "current": ...}`` (either may be left out) for ``app``."""
        body = dict(placement)
        if fencing is not None:
            body["fencing"] = fencing
        return self.request("PUT", f"{API}/placements/{_quote(app)}", body)

    # -- the controller fence ------------------------------------------------------------------
    def get_fence(self) -> dict[str, Any]:
        """The newest controller leader's fencing token ``{"term", "seq", ...}``."""
        return self.request("GET", f"{API}/fence")

    def raise_fence(self, token: dict[str, int]) -> dict[str, Any]:
        """A new leader announces its token; from then on the KB refuses older ones (409)."""
        return self.request("PUT", f"{API}/fence", {"term": int(token["term"]), "seq": int(token["seq"])})

    # -- events ----------------------------------------------------------------------------
    def list_events(
        self,
        since: float | None = None,
        application: str | None = None,
        cluster: str | None = None,
        limit: int = 100,
        after_id: int | None = None,
    ) -> list[dict[str, Any]]:
        params = {
            "since": since,
            "application": application,
            "cluster": cluster,
            "limit": limit,
            "after_id": after_id,
        }
        return self.request("GET", f"{API}/events", params=params)["events"]

    def post_event(self, event: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"{API}/events", event)

    # -- whole inventory -------------------------------------------------------------------
    def inventory(self) -> dict[str, Any]:
        return self.request("GET", f"{API}/inventory")

    def changes(
        self,
        cursor: str | None = None,
        stale_after: float | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """The KB's change feed: everything without ``cursor`` (``full``; in pages of ``limit``
        clusters after ``after`` when given, ``next`` naming the next page), else what changed
        materially since it, plus the ``stale`` clusters; KBError 410 when the KB does not know
        the cursor (it restarted): read again without one."""
        params = {"cursor": cursor, "stale_after": stale_after, "limit": limit, "after": after}
        return self.request("GET", f"{API}/changes", params=params)

    def inventory_page(self, limit: int = 200, after: str | None = None) -> dict[str, Any]:
        """One page of the inventory's clusters (by name) and the ``next`` page's ``after``."""
        return self.request("GET", f"{API}/inventory/page", params={"limit": limit, "after": after})

    def summary(self) -> dict[str, Any]:
        """Cluster counts by tier and health, and the clusters that are not healthy."""
        return self.request("GET", f"{API}/summary")

    def with_timeout(self, timeout: float) -> KBClient:
        """The same KB and token with another per-request timeout (its own connections)."""
        other = copy.copy(self)
        other.timeout = float(timeout)
        other._idle = []
        other._lock = threading.Lock()
        return other

    def healthz(self) -> dict[str, Any]:
        return self.request("GET", "/healthz")
