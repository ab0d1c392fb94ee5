"""Issue 34.3 end to end: a failed rollout names the same real reason everywhere a user looks.

Version 1 of an application runs; version 2's image cannot be pulled. The real ansible-playbook
(qonnect.core.deploy, wait_timeout 20 s) fails, and its message, its per-cluster ``reasons``, the
KB's DeployFailed event, the agent's report and ``qonnect status`` all name ImagePullBackOff (or
ErrImagePull, the pull's first state) with the image - never only "1 old replica(s) pending
termination", and never "1/1 pods ready" for the old pod still serving. The paper testbed, its
KB and agents are the session's (real processes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ansible_federation import recap
from support import run_qonnect, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APP = "guestbook34"
UNPULLABLE = "qonnect.test/pull-fail/guestbook:2"
PULL_REASONS = ("ImagePullBackOff", "ErrImagePull")


def spec(tmp_path: Path, image: str) -> str:
    labels = {"app": "web"}
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }
    body = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": APP, "namespace": APP},
        "spec": {
            "objective": {"energy": 1.0},
            "services": [{"name": "web", "tier": "edge", "manifests": [web]}],
        },
    }
    path = tmp_path / f"{APP}-{image.rsplit(':', 1)[-1]}.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return str(path)


def fatal(output: str) -> dict:
    """The module's failed result, as the default callback prints it."""
    found = re.search(r"^fatal: \[localhost\]: FAILED! => (\{.*\})$", output, re.MULTILINE)
    assert found, output
    return json.loads(found.group(1))


def status_line(federation) -> str:
    run = run_qonnect(
        "status", "--kb", federation.kb_url, "--token-file", str(federation.admin_token_file), check=False
    )
    assert run.returncode == 0, run.stderr
    lines = [x.strip() for x in run.stdout.splitlines() if f"{APP}/web" in x]
    return lines[0] if lines else ""


def test_an_unpullable_image_is_named_by_deploy_its_event_and_status(federation, tmp_path: Path):
    first = federation.playbook("qonnect.core.deploy", "-e", f"app_file={spec(tmp_path, 'nginx:1.27')}")
    assert recap(first)["failed"] == 0, first.stdout + first.stderr
    try:
        run = federation.playbook(
            "qonnect.core.deploy", "-e", f"app_file={spec(tmp_path, UNPULLABLE)}", "-e", "wait_timeout=20"
        )
        assert recap(run)["failed"] == 1, run.stdout
        result = fatal(run.stdout)
        (host,) = [c for c, r in result["clusters"].items() if r["status"] == "failed"]
        error = result["clusters"][host]["error"]
        ((pod,),) = [w["pods"] for w in result["clusters"][host]["reasons"]]
        assert pod["reason"] in PULL_REASONS and pod["image"] == UNPULLABLE, result["clusters"][host]
        assert f"Deployment/web: {pod['reason']}: " in error and UNPULLABLE in error, error
        assert error in result["msg"]

        events = federation.kb().list_events(application=APP, limit=50)
        (failed,) = [e for e in events if e.get("reason") == "DeployFailed"]
        assert failed["cluster"] == host and failed["message"] == error

        # the agent reports the new revision's reason; status shows it, not the old pod's 1/1
        line = wait_for(
            lambda: _with_reason(status_line(federation)),
            60,
            "qonnect status to show the agent's reason",
        )
        assert "pods ready" not in line and UNPULLABLE in line, line
        assert re.match(
            rf"{APP}/web x1 \(Progressing: Deployment/web: (ImagePullBackOff|ErrImagePull): ", line
        )
    finally:
        removed = federation.playbook("qonnect.core.remove", "-e", f"app={APP}")
        assert recap(removed)["failed"] == 0, removed.stdout + removed.stderr


def _with_reason(line: str) -> str | None:
    """The status line when it names one of the pull reasons, else None (keep waiting)."""
    return line if any(r in line for r in PULL_REASONS) else None
