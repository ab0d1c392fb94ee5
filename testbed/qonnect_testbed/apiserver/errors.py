"""Error and authentication middlewares: every failure leaves as a metav1 Status object."""

from __future__ import annotations

import hmac
import logging
from typing import Awaitable, Callable, Mapping

from aiohttp import web

from qonnect_testbed.apiserver.authz import Grant, check, request_info
from qonnect_testbed.store import ApiError

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PUBLIC_PATHS = frozenset(("/healthz", "/livez", "/readyz", "/version"))
_HTTP_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
}


def status_response(err: ApiError) -> web.Response:
    """The JSON Status response for an error."""
    return web.json_response(err.status(), status=err.code)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn ApiError, aiohttp's HTTP errors and crashes into Status responses."""
    try:
        return await handler(request)
    except ApiError as err:
        return status_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = _HTTP_REASONS.get(exc.status, "InternalError")
        message = "the server could not find the requested resource" if exc.status == 404 else exc.reason
        return status_response(ApiError(exc.status, reason, message))
    except Exception:  # a bug in the emulator must still answer like a server: 500 Status
        log.exception("internal error serving %s %s", request.method, request.path)
        return status_response(
            ApiError(500, "InternalError", "an error on the server has prevented the request from succeeding")
        )


def auth_middleware(
    token: str, grants: Mapping[str, Grant] | None = None
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """Require `Authorization: Bearer <token>` on everything except health and version; the
    admin token may do anything, a granted token only what its grant allows (apiserver/authz.py)."""
    expected = f"Bearer {token}".encode()
    granted = [(f"Bearer {t}".encode(), g) for t, g in (grants or {}).items()]

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.rstrip("/") not in PUBLIC_PATHS and not request.path.startswith(
            ("/healthz/", "/livez/", "/readyz/")
        ):
            given = request.headers.get("Authorization", "").encode()
            grant = next((g for bearer, g in granted if hmac.compare_digest(given, bearer)), None)
            if grant is not None:
                check(grant, request_info(request))
            elif not hmac.compare_digest(given, expected):
                raise ApiError(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    return middleware
