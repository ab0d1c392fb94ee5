"""The real engine's binaries for the tests that run real Kubernetes control planes.

A cold build takes longer than a test's timeout, so a conftest asks for them once, at collection
(``BINARIES.prepare``), before any test runs. A failed build is kept and raised by ``bin()``, so
those tests fail instead of being skipped.
"""

from __future__ import annotations

from pathlib import Path


class Binaries:
    """The binaries of the session: built (or taken from the cache) at most once."""

    def __init__(self) -> None:
        self._prepared = False
        self._error: Exception | None = None

    def prepare(self, needed: bool) -> None:
        """Build now if some collected test needs the engine and no conftest did so already."""
        if self._prepared or not needed:
            return
        self._prepared = True
        from qonnect_testbed.kube import BinariesError, ensure_binaries

        try:
            ensure_binaries()
        except BinariesError as exc:
            self._error = exc

    def bin(self) -> Path:
        """The bin directory (kube-apiserver, ..., kubectl), or the build's failure."""
        if self._error is not None:
            raise self._error
        from qonnect_testbed.kube import ensure_binaries

        return ensure_binaries()


BINARIES = Binaries()
