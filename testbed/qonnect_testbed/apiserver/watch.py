"""Watch streams: chunked JSON lines of {type, object}, resumable from a resourceVersion.

With a selector, objects that start or stop matching are sent as ADDED or DELETED, as real
servers do. A resourceVersion older than the store's history ends in an ERROR event with a 410
Expired Status, which tells clients to list again.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Callable

from aiohttp import web

from qonnect_testbed.apiserver.tables import table
from qonnect_testbed.store import ApiError, ResourceType, Store

DEFAULT_TIMEOUT = 1800.0
BOOKMARK_INTERVAL = 30.0


class _Filter:
    """Maps store events to the events one watcher should see."""

    def __init__(self, namespace: str | None, matcher: Callable[[dict], bool]):
        self.namespace = namespace
        self.matcher = matcher
        self.known: set[tuple[str, str]] = set()

    def __call__(self, event: str, obj: dict) -> str | None:
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return None
        key = (meta.get("namespace", ""), meta["name"])
        matches = self.matcher(obj)
        if event == "DELETED":
            if key in self.known or matches:
                self.known.discard(key)
                return "DELETED"
            return None
        if matches:
            out = "MODIFIED" if event == "MODIFIED" and key in self.known else "ADDED"
            self.known.add(key)
            return out
        if key in self.known:
            self.known.discard(key)
            return "DELETED"
        return None


async def serve_watch(  # noqa: C901 - over the budget before it was set; split when next changed
    request: web.Request,
    store: Store,
    rt: ResourceType,
    namespace: str | None,
    *,
    as_table: bool,
    include: str,
) -> web.StreamResponse:
    """Stream changes of rt (in namespace, if given) until timeoutSeconds or disconnect."""
    query = request.query
    matcher = store.matcher(rt.key, query.get("labelSelector"), query.get("fieldSelector"))
    try:
        timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    except ValueError:
        raise ApiError(400, "BadRequest", "timeoutSeconds: expected a number of seconds") from None
    rv_text = query.get("resourceVersion") or ""
    if rv_text and not rv_text.isdigit():
        raise ApiError(400, "BadRequest", f"resourceVersion: expected a number, got {rv_text!r}")
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    wanted = _Filter(namespace if rt.namespaced else None, matcher)
    queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()

    def on_event(event: str, resource: str, obj: dict) -> None:
        if resource == rt.key:
            queue.put_nowait((event, obj))

    backlog: list[tuple[str, dict]] = []
    error: ApiError | None = None
    if rv_text in ("", "0"):
        backlog = [("ADDED", o) for o in store.list_refs(rt.key, namespace)[0]]
    else:
        try:
            wanted.known = {
                (o["metadata"].get("namespace", ""), o["metadata"]["name"])
                for o in store.list_refs(rt.key, namespace)[0]
                if matcher(o)
            }
            backlog = [
                (etype, obj) for _rv, etype, _resource, obj in store.events_since(rt.key, int(rv_text))
            ]
        except ApiError as err:
            error = err
    unsubscribe = store.subscribe(on_event, copy=False)
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    first = True

    def line(event: str, obj: dict) -> bytes:
        nonlocal first
        if as_table and event != "ERROR" and event != "BOOKMARK":
            obj = table(rt.plural, [obj], obj["metadata"].get("resourceVersion", ""), include)
            if not first:
                obj["columnDefinitions"] = []
            first = False
        return json.dumps({"type": event, "object": obj}).encode() + b"\n"

    try:
        await response.prepare(request)
        if error is not None:
            await response.write(line("ERROR", error.status()))
            return response
        for event, obj in backlog:
            if out := wanted(event, obj):
                await response.write(line(out, obj))
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event, obj = await asyncio.wait_for(queue.get(), min(left, BOOKMARK_INTERVAL))
            except asyncio.TimeoutError:
                if bookmarks and deadline - time.monotonic() > 0:
                    mark = {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(store.resource_version)},
                    }
                    await response.write(line("BOOKMARK", mark))
                continue
            if out := wanted(event, obj):
                await response.write(line(out, obj))
    except ConnectionResetError:  # the client went away
        pass
    finally:
        unsubscribe()
    return response
