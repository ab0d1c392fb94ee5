"""A small asyncio client for one real kube-apiserver: the simulated kubelet's and the host's.

The official ``kubernetes`` client is synchronous and starts a thread pool per client; the
testbed process drives several clusters from one asyncio loop, so it speaks JSON over aiohttp:
create, get, list, (merge and strategic-merge) patch, delete and watch, with the admin token and
the testbed CA. Errors carry the API's status code and message.
"""

from __future__ import annotations

import json
import ssl
from typing import Any, AsyncIterator

import aiohttp

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class KubeApiError(Exception):
    """An HTTP error from the API server (code 0: it could not be reached)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message


class KubeApi:
    """JSON calls against one API server with a bearer token, verified against the CA."""

    def __init__(self, server: str, token: str, ca_file: str, *, timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers, connector=aiohttp.TCPConnector(ssl=self._ssl, limit=8)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One call; returns the decoded JSON body, raises KubeApiError on >= 400 or no answer."""
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        limit = aiohttp.ClientTimeout(total=timeout) if timeout else self._timeout
        try:
            async with self._client().request(
                method, self.server + path, data=data, params=params, headers=headers, timeout=limit
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    raise KubeApiError(response.status, _message(text) or response.reason or "")
                if not response.content_type.endswith("json"):
                    return {"text": text}  # e.g. /readyz answers "ok"
                return json.loads(text) if text else {}
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeApiError(0, f"{self.server}: {exc or type(exc).__name__}") from None

    async def get(self, path: str, **kw: Any) -> dict[str, Any]:
        return await self.request("GET", path, **kw)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body)

    async def patch(self, path: str, body: dict[str, Any], content_type: str = MERGE) -> dict[str, Any]:
        return await self.request("PATCH", path, body, content_type=content_type)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("DELETE", path, body)

    async def ensure(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create, treating AlreadyExists as success (set-up steps are repeated on restart)."""
        try:
            return await self.create(path, body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
            return {}

    async def watch(
        self, path: str, resource_version: str, *, params: dict[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events from resource_version; ends when the server closes the stream."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "240",
            **(params or {}),
        }
        try:
            async with self._client().get(
                self.server + path, params=query, timeout=aiohttp.ClientTimeout(total=300, sock_read=300)
            ) as resp:
                if resp.status >= 400:
                    raise KubeApiError(resp.status, _message(await resp.text()))
                async for line in resp.content:
                    if line.strip():
                        yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeApiError(0, f"{self.server}: {exc or type(exc).__name__}") from None


def _message(text: str) -> str:
    try:
        return str(json.loads(text).get("message", text))
    except (ValueError, AttributeError):
        return text[:500]
