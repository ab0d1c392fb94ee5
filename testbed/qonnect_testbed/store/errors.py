"""Failed requests of the emulated API server, in the shape real servers report them."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failed request; the API server turns it into a metav1 Status with the same fields."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        """The metav1 Status object real servers send for this error."""
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with field causes, as real servers report validation failures."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes
            ],
        },
    )
