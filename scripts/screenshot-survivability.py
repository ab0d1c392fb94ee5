"""Remake docs/img/survivability.png: the status page's N-1 survivability panel, from a real stack.

    python scripts/screenshot-survivability.py [--out docs/img/survivability.png] [--keep DIR]

Starts (through qonnect.demo.stack, as `qonnect demo up` does) the paper's nine emulated
clusters, a KB, one agent per cluster and ONE controller replica; deploys the docs' Bookinfo
variant `bookinfo-peak.yml` (read from docs/whatif.md) with playbooks/deploy.yml as a user
does; waits for the controller's own `controller.survivability.fleet` event saying the fleet
is not survivable; loads /ui in headless Chromium with a reader token (given in the URL
fragment, which the page removes) and saves a screenshot of the panel only. Everything it
started is stopped at the end, also on failure. Needs chromium, chromium-driver and selenium.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml
from qonnect.demo.stack import Stack, free_port, write_secret
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[1]
FLEET = "controller.survivability.fleet"


def peak_spec() -> str:
    """The YAML block of docs/whatif.md that follows the mention of bookinfo-peak.yml."""
    doc = (REPO / "docs" / "whatif.md").read_text()
    after = doc[doc.index("this is `bookinfo-peak.yml`") :]
    block = re.search(r"```yaml\n(.*?)```", after, re.S)
    if not block:
        raise SystemExit("docs/whatif.md: no yaml block after bookinfo-peak.yml")
    spec = yaml.safe_load(block.group(1))
    reviews = next(s for s in spec["spec"]["services"] if s["name"] == "reviews")
    assert reviews["replicas"] == 6, reviews
    return block.group(1)


def wait(what: str, check, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")


def start(stack: Stack) -> None:
    stack.start_testbed()
    stack.start_kb()
    stack.register_clusters()
    stack.start_agents()
    write_secret(stack.root / "raft.secret", secrets.token_hex(32))
    address = f"127.0.0.1:{free_port()}"
    replica = {"id": "c1", "raft": address, "peers": [address]}
    stack.state["replicas"] = [replica]
    stack.start_replica(replica)
    stack.wait_replica(replica)
    wait("a controller leader", stack.leader, 60)


def verdict(stack: Stack) -> dict | None:
    """The controller's newest fleet verdict, once it says bookinfo is not survivable."""
    events = [e for e in stack.admin.list_events(limit=1000, after_id=0) if e["type"] == FLEET]
    last = max(events, key=lambda e: e["id"], default=None)
    data = (last or {}).get("data") or {}
    lost = data.get("survivable") is False and "bookinfo" in (data.get("not_survivable") or {})
    return last if lost else None


def shoot(url: str, token: str, out: Path, profile: Path) -> None:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1200,1600",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(30)
        driver.get(f"{url}/ui#token={token}")
        WebDriverWait(driver, 60).until(
            lambda d: d.execute_script(
                "const s = document.getElementById('survivability');"
                "return s && s.dataset.survivable === 'no' && document.getElementById('login').hidden !== false"
                " ? s.innerText : ''"
            )
        )
        assert token not in driver.current_url
        panel = driver.find_element(By.ID, "survivability")
        driver.execute_script("arguments[0].scrollIntoView()", panel)
        assert token not in panel.text
        # the panel with a margin of the page around it, at one device pixel per CSS pixel
        box = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}",
            panel,
        )
        margin = 16
        clip = {
            "x": max(0, box["x"] - margin),
            "y": max(0, box["y"] - margin),
            "width": box["width"] + 2 * margin,
            "height": box["height"] + 2 * margin,
            "scale": 1,
        }
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip})
        out.write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "survivability.png")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it (logs)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="qonnect-shot-"))
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stack = Stack(root, "emulator")
    stack.reset()
    try:
        start(stack)
        # the spec as the docs keep it: beside examples/, manifest paths relative to it
        (root / "examples").symlink_to(REPO / "examples")
        (root / "bookinfo-peak.yml").write_text(peak_spec())
        stack.playbook("deploy-bookinfo-peak", "deploy", app_file="bookinfo-peak.yml")
        event = wait("the controller's fleet verdict", lambda: verdict(stack), 120)
        print(f"controller verdict (event {event['id']}): {event.get('message', '')}")
        token = (stack.tokens / "reader.token").read_text().strip()
        shoot(stack.state["kb_url"], token, args.out, root / "chromium")
        print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    finally:
        print("stopped:", ", ".join(stack.down()))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
