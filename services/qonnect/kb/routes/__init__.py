"""The KB's HTTP routes, one module per resource family, all under /api/v1."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator

from qonnect.kb.models import NAME_PATTERN, ErrorBody, storable

_TEXT = {
    400: "malformed request",
    401: "no or an invalid bearer token",
    403: "the token's role may not do this",
    404: "no such resource",
    409: "conflict with the stored state",
    410: "the cursor is not known to this KB (restarted, or too old): read again without one",
    413: "request body too large",
    422: "invalid request: detail names the field",
    503: "database unavailable",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route can give (always 400/401/403/422/503)."""
    wanted = sorted({400, 401, 403, 422, 503, *codes})
    return {code: {"model": ErrorBody, "description": _TEXT[code]} for code in wanted}


Name = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="a DNS label")]
QueryText = Annotated[str | None, Query(max_length=253), AfterValidator(storable)]
