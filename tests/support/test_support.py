"""The shared test helpers behave as the tests rely on."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from support import free_port, run, stop_process, wait_for
from support.specs import deployment


def test_wait_for_returns_the_value_and_names_what_timed_out():
    calls = iter([0, "", "ready"])
    assert wait_for(lambda: next(calls), 5, "three polls", interval=0.01) == "ready"
    with pytest.raises(
        AssertionError, match=r"timed out after 0.1s waiting for nothing \(last error: 'boom'\)"
    ):
        wait_for(
            lambda: (x for x in ()).throw(KeyError("boom")),
            0.1,
            "nothing",
            interval=0.01,
            retry_on=(KeyError,),
        )


def test_wait_for_does_not_hide_unexpected_errors():
    with pytest.raises(ZeroDivisionError):
        wait_for(lambda: 1 / 0, 1, "a bug")


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_stop_process_ends_a_group_and_one_that_ignores_sigterm(tmp_path):
    ready = tmp_path / "ignoring"
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)",
            str(ready),
        ],
        start_new_session=True,
    )
    # SIGTERM only once it is ignored: a busy machine may take seconds to start the interpreter
    wait_for(ready.exists, 30, "the child to ignore SIGTERM")
    started = time.monotonic()
    assert stop_process(stubborn, timeout=0.5) == -9
    assert time.monotonic() - started < 10


def test_run_fails_the_test_with_the_commands_output():
    ok = run([sys.executable, "-c", "print('out')"])
    assert ok.stdout == "out\n"
    with pytest.raises(AssertionError, match=r"(?s)python\S* -c .* failed \(3\):\nnot this\n"):
        run([sys.executable, "-c", "import sys; print('not this'); sys.exit(3)"])
    assert run([sys.executable, "-c", "raise SystemExit(4)"], check=False).returncode == 4


def test_deployment_builder_selects_its_own_pods():
    doc = deployment("web", 3, "nginx", "100m", memory="64Mi", namespace="shop", port=80)
    assert doc["metadata"] == {"name": "web", "namespace": "shop"}
    assert (
        doc["spec"]["selector"]["matchLabels"]
        == doc["spec"]["template"]["metadata"]["labels"]
        == {"app": "web"}
    )
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"}}
    assert container["ports"] == [{"containerPort": 80}] and doc["spec"]["replicas"] == 3
    assert "resources" not in deployment("bare")["spec"]["template"]["spec"]["containers"][0]
