"""The KB's /ui status page in headless Chromium (Debian's chromium + chromium-driver).

The page is loaded from a real KB holding the paper fleet; it must show the nine clusters by
tier, then - after a controller-style migration is written through the API (decision and
migration events, a fenced placement write, the failed cluster reporting unreachable) - show the
migration without a reload. Set QONNECT_UI_SCREENSHOT=PATH to keep a screenshot for review.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient
from qonnect.controller import journal
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TIERS = ("cloud", "fog", "edge")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(
                f"{path} is missing: apt-get install -y chromium chromium-driver "
                "(scripts/setup-venv.sh does it when run as root)"
            )
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1700",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    service = Service(executable_path=CHROMEDRIVER, log_output=str(profile.parent / "chromedriver.log"))
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for downloads
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


# The page re-renders every refresh: an element found before one may be gone after it. Reads go
# through one script call each (no element reference outlives it), waits retry a stale reference.
STALE = (StaleElementReferenceException,)


def until(driver: webdriver.Chrome, check, timeout: float = 20):
    return WebDriverWait(driver, timeout, ignored_exceptions=STALE).until(check)


def text(driver: webdriver.Chrome, css: str) -> str:
    """The text of the element ``css`` selects, as rendered now ("" if there is none)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css
    )


def clusters_by_tier(driver: webdriver.Chrome) -> dict[str, list[str]]:
    return driver.execute_script(
        "return Object.fromEntries(arguments[0].map(t => [t, "
        "[...document.querySelectorAll(`#tier-${t} .cluster`)].map(e => e.dataset.cluster)]))",
        TIERS,
    )


def card(driver: webdriver.Chrome, name: str) -> dict[str, str]:
    """One cluster's card: its text and health, read at once."""
    return driver.execute_script(
        'const e = document.querySelector(`.cluster[data-cluster="${arguments[0]}"]`);'
        "return e ? {text: e.innerText, health: e.dataset.health} : {text: '', health: ''}",
        name,
    )


def test_ui_is_static_and_needs_no_token_but_the_api_does(federation) -> None:
    with urllib.request.urlopen(federation.url + "/ui", timeout=5) as resp:
        html = resp.read().decode()
        csp = resp.headers["Content-Security-Policy"]
    assert "<title>qonnect federation</title>" in html
    assert "connect-src 'self'" in csp and "script-src 'self'" in csp
    for name in ("app.js", "style.css"):
        with urllib.request.urlopen(f"{federation.url}/ui/{name}", timeout=5) as resp:
            assert resp.status == 200 and resp.read()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(federation.url + "/ui/../kb.sqlite", timeout=5)
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(federation.url + "/api/v1/clusters", timeout=5)
    assert err.value.code == 401


def test_page_asks_for_a_token_and_refuses_a_wrong_one(federation, browser: webdriver.Chrome) -> None:
    browser.get(federation.url + "/ui")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    form = WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "login"))
    WebDriverWait(browser, 15).until(lambda d: form.is_displayed())
    browser.find_element(By.ID, "token").send_keys("qkb_not-a-real-token")
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(browser, 15).until(lambda d: "not valid" in d.find_element(By.ID, "login-error").text)
    assert not browser.find_element(By.ID, "content").is_displayed()


def test_page_shows_the_fleet_then_a_migration(federation, browser: webdriver.Chrome, tmp_path: Path) -> None:
    browser.get(f"{federation.url}/ui#token={federation.reader_token}")
    until(browser, lambda d: sum(map(len, clusters_by_tier(d).values())) == 9)
    assert federation.reader_token not in browser.current_url  # taken out of the address bar
    assert not browser.find_element(By.ID, "login").is_displayed()
    tiers = clusters_by_tier(browser)
    assert tiers == {tier: [f"{tier}-{i}" for i in (1, 2, 3)] for tier in TIERS}
    assert {card(browser, name)["health"] for names in tiers.values() for name in names} == {"healthy"}
    cloud1 = card(browser, "cloud-1")["text"]
    assert "bookinfo/productpage" in cloud1 and "(1/1 ready)" in cloud1
    assert "bookinfo/ratings" in card(browser, "edge-1")["text"]
    assert "nothing placed here" in card(browser, "cloud-2")["text"]
    summary = text(browser, "#summary")
    assert "9 clusters, 9 healthy" in summary and "fencing term -" in summary  # no controller wrote yet

    # A failover, written the way the controller writes it: cloud-1 is lost, productpage moves.
    cloud1 = next(c for c in federation.paper["clusters"] if c["name"] == "cloud-1")
    federation.report(cloud1, reachable=False)
    federation.admin.post_event(
        {"type": "agent.restarted", "message": "agent on fog-2 restarted", "cluster": "fog-2"}
    )
    controller = KBClient(federation.url, federation.token("controller"))
    decision = {
        "id": "d7",
        "app": "bookinfo",
        "kind": "cluster-down",
        "exclude": ["cloud-1"],
        "token": {"term": 4, "seq": 12},
    }
    journal.post(controller, journal.DECISION, decision, "cluster cloud-1 is down: move productpage")
    journal.post(controller, journal.STARTED, decision, "attempt 1: migrating", attempt=1)
    moved = {
        svc: [{"cluster": "cloud-2" if where == "cloud-1" else where, "replicas": 1}]
        for svc, where in {
            "productpage": "cloud-1",
            "details": "fog-1",
            "reviews": "fog-1",
            "ratings": "edge-1",
        }.items()
    }
    controller.put_placement("bookinfo", {"desired": moved, "current": moved}, fencing={"term": 4, "seq": 12})
    journal.post(
        controller, journal.SUCCEEDED, decision, "attempt 1 succeeded: productpage now on cloud-2", attempt=1
    )

    until(
        browser,
        lambda d: d.find_elements(
            By.CSS_SELECTOR, '#timeline li[data-type="controller.migration.succeeded"]'
        ),
    )
    timeline = text(browser, "#timeline")
    assert "productpage now on cloud-2" in timeline
    assert "controller.decision" in timeline and "cluster cloud-1 is down" in timeline
    assert "bookinfo deployed energy-first" in timeline
    until(browser, lambda d: "bookinfo/productpage" in card(d, "cloud-2")["text"], 10)
    cloud1 = card(browser, "cloud-1")
    assert "bookinfo/productpage" not in cloud1["text"]
    assert cloud1["health"] == "unreachable" and "connection refused" in cloud1["text"]
    row = text(browser, '#placements tr[data-service="productpage"]')
    assert "cloud-2" in row and "4/12" in row
    summary = text(browser, "#summary")
    assert "9 clusters, 8 healthy" in summary and "fencing term 4" in summary

    assert "agent on fog-2 restarted" not in timeline  # routine events only on request
    browser.find_element(By.ID, "all-events").click()  # the timeline is fetched again, with them
    until(browser, lambda d: "agent on fog-2 restarted" in text(d, "#timeline"), 10)
    shot = tmp_path / "status.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("QONNECT_UI_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["QONNECT_UI_SCREENSHOT"])


def test_page_shows_a_failing_new_revision_s_reason(federation, browser: webdriver.Chrome) -> None:
    """Issue 34.3: the old pod still counts 1/1 ready while the new revision crash-loops; the
    card and the placements table show the reason the agent reports, not "1/1 ready"."""
    crash = (
        "CrashLoopBackOff: last exit code 1, restarted 3 times: back-off 40s restarting failed "
        "container=ratings (pod ratings-v1-7d9-x2k, container ratings)"
    )
    edge1 = next(c for c in federation.paper["clusters"] if c["name"] == "edge-1")
    federation.report(edge1, failing={"ratings": crash})
    try:
        browser.get(f"{federation.url}/ui#token={federation.reader_token}")
        until(browser, lambda d: "CrashLoopBackOff" in card(d, "edge-1")["text"])
        edge = card(browser, "edge-1")["text"]
        assert f"bookinfo/ratings \u00d71 (Progressing: Deployment/ratings-v1: {crash})" in edge, edge
        assert "1/1 ready" not in edge
        row = text(browser, '#placements tr[data-service="ratings"]')
        assert "last exit code 1" in row and "1/1" not in row, row
        assert (
            browser.execute_script(
                "return document.querySelector('.cluster[data-cluster=\"edge-1\"] li[data-status]').dataset.status"
            )
            == "Progressing"
        )
    finally:
        federation.report(edge1)
