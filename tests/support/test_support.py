"""The shared test helpers behave as the tests rely on."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from support import free_port, stop_process, wait_for


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
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
        ],
        start_new_session=True,
    )
    time.sleep(0.3)
    started = time.monotonic()
    assert stop_process(stubborn, timeout=0.5) == -9
    assert time.monotonic() - started < 10
