# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fence checks between the steps of a controller's migration.

A controller leader announces its fencing token to the KB (``PUT /api/v1/fence``) before it
acts; the KB then refuses older tokens. The KB write at the end of a deploy is fenced, but the
clusters are changed before it (apply, switch, prune), so a deposed leader's run must also
stop between those steps: ``fence_guard`` returns a check the deployer calls before each one.

The same check orders a controller's run and a user's deploy of the same application (issue
34.4): a run that placed version N stops before its next cluster-changing step once a newer
version is stored (a user's deploy supersedes it; the controller records the run superseded).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError


class FencedError(QonnectError, ValueError):
    """A newer controller leader holds the fence: this run must not change anything more."""


def newer_fence(fence: dict, token: dict) -> bool:
    """Whether the KB's fence is newer than the run's token."""
    return (int(fence.get("term") or 0), int(fence.get("seq") or 0)) > (int(token["term"]), int(token["seq"]))


class FenceGuard:
    """The check to call before each cluster-changing step; it carries the run's token, which
    the deployer also stamps on every object it writes (k8s/apply.py)."""

    def __init__(self, kb: Any, token: dict, app: str | None = None, version: int | None = None) -> None:
        self.kb, self.token = kb, token
        self.app, self.version = app, version  # the application version this run places

    def __call__(self, step: str) -> None:
        token = self.token
        try:
            fence = self.kb.get_fence()
        except KBError as exc:  # status 0: the KB could not be reached
            raise FencedError(
                f"fencing: cannot check the controller fence before {step} ({exc}); "
                "stopping so a deposed leader cannot change clusters"
            ) from None
        if newer_fence(fence or {}, token):
            raise FencedError(
                f"fencing: stopped before {step}: a newer controller leader holds the fence "
                f"(term {fence.get('term')}, seq {fence.get('seq')}) > this run's token "
                f"(term {token['term']}, seq {token['seq']})"
            )
        if self.app is not None and self.version is not None:
            self._still_newest(step)

    def _still_newest(self, step: str) -> None:
        """Stop when a newer version of the application was stored since this run loaded its own."""
        placing = int(self.version or 0)
        try:
            stored = self.kb.get_application(self.app).get("version")
        except KBError as exc:
            raise FencedError(
                f"fencing: cannot check the version of {self.app} before {step} ({exc}); stopping"
            ) from None
        if isinstance(stored, int) and stored > placing:
            raise FencedError(
                f"superseded by version {stored}: stopped before {step}; version {stored} of "
                f"{self.app} was stored after this run loaded version {placing}"
            )


def fence_guard(
    kb: Any, token: dict | None, app: str | None = None, version: int | None = None
) -> FenceGuard | None:
    """A check to call before each cluster-changing step; None for runs without a token (a
    user's deploy). With ``app`` and ``version``: also stop once a newer version is stored.
    Fails closed: a KB that cannot be asked stops the run too."""
    return FenceGuard(kb, token, app, version) if token else None
