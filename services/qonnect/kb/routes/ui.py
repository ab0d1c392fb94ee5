"""The read-only status page at /ui: three static files, no token needed to fetch them.

The page's script reads the KB API with a bearer token the user supplies, so nothing here
touches the database. A strict Content-Security-Policy keeps the page from loading or sending
anything anywhere but this KB.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Response

router = APIRouter(include_in_schema=False)

TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return resources.files("qonnect.kb.ui").joinpath(name).read_bytes()


def _serve(name: str) -> Response:
    return Response(_read(name), media_type=TYPES[name], headers=HEADERS)


@router.get("/ui")
def index() -> Response:
    """The status page."""
    return _serve("index.html")


@router.get("/ui/{name}")
def asset(name: str) -> Response:
    """The page's script and style sheet."""
    if name not in TYPES:
        raise HTTPException(404, f"name: no such file {name!r} under /ui")
    return _serve(name)
