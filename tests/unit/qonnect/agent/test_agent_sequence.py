"""Report sequence numbers only grow: fast calls, clock steps backwards, restarts."""

from __future__ import annotations

import time

from qonnect.agent.sequence import Sequence


def test_numbers_grow_even_when_the_clock_stands_still_or_goes_back():
    clock = iter([100, 100, 50, 200])
    seq = Sequence(clock_us=lambda: next(clock))
    assert [seq.next() for _call in range(4)] == [100, 101, 102, 200]


def test_restart_continues_above_the_persisted_number(tmp_path):
    path = tmp_path / "seq"
    first = Sequence(path, clock_us=lambda: 5_000)
    assert first.next() == 5_000
    assert first.next() == 5_001
    restarted = Sequence(path, clock_us=lambda: 10)  # clock stepped far back
    assert restarted.next() == 5_002


def test_default_clock_is_microseconds_and_json_safe():
    value = Sequence().next()
    assert abs(value / 1e6 - time.time()) < 5
    assert value < 2**53


def test_corrupt_state_file_falls_back_to_the_clock(tmp_path):
    path = tmp_path / "seq"
    path.write_text("garbage")
    assert Sequence(path, clock_us=lambda: 42).next() == 42


def test_an_unwritable_state_dir_does_not_stop_the_numbers(tmp_path):
    seq = Sequence(tmp_path / "gone" / "seq", clock_us=lambda: 7)
    assert [seq.next(), seq.next()] == [7, 8]
