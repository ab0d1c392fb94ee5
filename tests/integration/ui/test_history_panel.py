"""Issue 34.5: the status page's history panel shows an application's placement changes, newest
first, with from -> to, trigger, outcome and the failure's detail."""

from __future__ import annotations

import pytest
import test_status_page
from test_status_page import text, until

browser = test_status_page.browser  # that module's headless Chromium fixture, found by its name

pytestmark = pytest.mark.timeout(120)


def test_history_panel_shows_moves_newest_first(federation, browser) -> None:
    app = "bookinfo"
    version = federation.admin.get_application(app)["version"]
    for outcome, src, dst, trigger in (
        ("succeeded", [], ["edge-1"], "deploy"),
        ("failed", ["edge-1"], ["edge-1"], "deploy"),
        ("succeeded", ["edge-1"], ["edge-2"], "cluster-down"),
    ):
        federation.admin.record_history(
            app,
            {
                "version": version,
                "trigger": trigger,
                "outcome": outcome,
                "detail": "Deployment/ratings-v1: ImagePullBackOff" if outcome == "failed" else "",
                "started": 100.0,
                "ended": 103.0,
                "changes": [{"service": "ratings", "from": src, "to": dst}],
            },
        )
    browser.get(f"{federation.url}/ui#token={federation.reader_token}")
    until(browser, lambda d: len(d.find_elements("css selector", "#history tr[data-history]")) >= 3)
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#history tr[data-history]')].map(r => r.innerText)"
    )
    assert "edge-1 → edge-2" in rows[0] and "cluster-down" in rows[0] and "succeeded" in rows[0]
    assert "failed: Deployment/ratings-v1: ImagePullBackOff" in rows[1] and "user" in rows[1]
    assert "- → edge-1" in rows[2] and "3.0 s" in rows[2]
    assert text(browser, "#history-app") == app
