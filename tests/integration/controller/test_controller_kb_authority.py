"""The KB's side of exactly-once: the controller fence, and who may write controller.* events.

A real KB process; tokens of every role. Issue 11 items 1 (the fence, fenced events) and 6
(forged controller events, structured decision references).
"""

from __future__ import annotations

import pytest
from _controller_stack import Stack
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REF = {"id": "d7.3", "term": 7, "seq": 3, "exclude": ["edge-1", "edge-2"]}


def _client(stack: Stack, role: str, cluster: str | None = None) -> KBClient:
    return KBClient(stack.kb_url, stack.token(role, cluster))


def _app(stack: Stack, name: str) -> None:
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "services": [
                {
                    "name": "web",
                    "manifests": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "metadata": {"name": "web"},
                            "spec": {
                                "selector": {"matchLabels": {"app": "web"}},
                                "template": {
                                    "metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                                },
                            },
                        }
                    ],
                }
            ]
        },
    }
    stack.admin.request("PUT", f"/api/v1/applications/{name}", spec)


def test_only_controller_tokens_write_controller_events(kb_stack: Stack):
    stack = kb_stack
    stack.admin.request("PUT", "/api/v1/clusters/edge-9", {"tier": "edge", "location": "edge-9"})
    forged = {
        "type": "controller.decision",
        "message": "decided to re-place shop [decision d9.9 token 9/9 exclude edge-9]",
        "application": "shop",
        "ref": REF,
        "fencing": {"term": 99, "seq": 99},
    }
    for role, cluster in (("agent", "edge-9"), ("admin", None), ("reader", None)):
        client = stack.admin if role == "admin" else _client(stack, role, cluster)
        with pytest.raises(KBError) as err:
            client.post_event(forged)
        assert err.value.status == 403, (role, err.value)
    assert not [e for e in stack.events("shop") if e["type"].startswith("controller.")]
    ctl = _client(stack, "controller")
    with pytest.raises(KBError) as err:  # a controller event without its fencing token
        ctl.post_event({"type": "controller.decision", "application": "shop", "ref": REF})
    assert err.value.status == 422 and "fencing" in str(err.value)
    made = ctl.post_event(
        {
            "type": "controller.decision",
            "message": "people's text, not parsed",
            "application": "shop",
            "ref": REF,
            "fencing": {"term": 7, "seq": 3},
        }
    )
    assert made["role"] == "controller" and made["ref"]["id"] == "d7.3"
    listed = [e for e in stack.events("shop") if e["type"] == "controller.decision"]
    assert len(listed) == 1 and listed[0]["role"] == "controller"
    assert listed[0]["ref"] == dict(REF, attempt=None) and listed[0]["fencing"] == {"term": 7, "seq": 3}
    other = stack.admin.post_event({"type": "deploy", "application": "shop"})
    assert other["role"] == "admin" and other["ref"] is None


def test_fence_is_monotonic_and_refuses_older_tokens(kb_stack: Stack):
    stack = kb_stack
    ctl = _client(stack, "controller")
    _app(stack, "fenced")
    base = ctl.request("GET", "/api/v1/fence")
    term = base["term"] + 10
    ctl.put_placement("fenced", {"desired": {}, "current": {}}, {"term": term, "seq": 5})
    raised = ctl.request("PUT", "/api/v1/fence", {"term": term + 1, "seq": 6})
    assert (raised["term"], raised["seq"]) == (term + 1, 6)
    # the old leader's token (term, 5 and 7) is refused everywhere, before the new leader wrote a placement
    with pytest.raises(KBError) as err:
        ctl.put_placement("fenced", {"desired": {}, "current": {}}, {"term": term, "seq": 7})
    assert err.value.status == 409 and "controller fence" in str(err.value)
    with pytest.raises(KBError) as err:
        ctl.post_event(
            {
                "type": "controller.migration.succeeded",
                "application": "fenced",
                "ref": REF,
                "fencing": {"term": term, "seq": 7},
            }
        )
    assert err.value.status == 409
    with pytest.raises(KBError) as err:  # the fence never goes down
        ctl.request("PUT", "/api/v1/fence", {"term": term, "seq": 99})
    assert err.value.status == 409
    with pytest.raises(KBError) as err:  # only controllers raise it
        stack.admin.request("PUT", "/api/v1/fence", {"term": term + 5, "seq": 1})
    assert err.value.status == 403
    same = ctl.request("PUT", "/api/v1/fence", {"term": term + 1, "seq": 6})
    assert (same["term"], same["seq"]) == (term + 1, 6)
    ctl.put_placement("fenced", {"desired": {}, "current": {}}, {"term": term + 1, "seq": 8})
    assert stack.admin.request("GET", "/api/v1/fence")["term"] == term + 1
