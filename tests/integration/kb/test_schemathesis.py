"""Schemathesis against a live KB (SQLite and PostgreSQL) with an admin token: generated valid
and invalid requests for every operation must never get a 5xx nor an answer that breaks the
OpenAPI schema (status code, content type, body), and no operation may skip authentication."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    ignored_auth,
]
EXAMPLES = 5  # requests per operation and generation mode (about 27 operations)


def _fuzz(operation, mode: GenerationMode, url: str, headers: dict) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        case.call_and_validate(base_url=url, headers=headers, checks=CHECKS, timeout=10)

    run()


@pytest.mark.timeout(120)
def test_no_server_errors_and_no_schema_violations(live_kb):
    headers = {"Authorization": f"Bearer {live_kb.admin_token}"}
    schema = schemathesis.openapi.from_url(f"{live_kb.url}/openapi.json", headers=headers, wait_for_schema=10)
    failures: list[str] = []
    operations = 0
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(operation, mode, live_kb.url, headers)
            except Unsatisfiable:  # nothing to make invalid (no parameters, no body)
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
    assert operations >= 17
    assert not failures, "\n\n".join(failures)
    assert time.monotonic() - started < 60
