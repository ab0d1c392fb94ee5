"""The report short path writes its own status line: any status the writer's outcome can carry
(not only the few it usually does) gets its reason phrase instead of a KeyError in a callback."""

from __future__ import annotations

import pytest
from qonnect.kb.hotpath import _reason


@pytest.mark.parametrize(
    ("status", "phrase"),
    [
        (200, b"OK"),
        (404, b"Not Found"),
        (409, b"Conflict"),
        (422, b"Unprocessable Entity"),
        (503, b"Service Unavailable"),
    ],
)
def test_every_status_has_its_reason_phrase(status, phrase):
    assert _reason(status) == phrase


def test_an_unknown_status_gets_an_empty_phrase():
    assert _reason(799) == b""
