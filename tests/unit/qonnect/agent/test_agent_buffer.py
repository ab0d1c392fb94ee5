"""The bounded outbox: order, compaction of the oldest reports, persistence."""

from __future__ import annotations

import json

import pytest
from qonnect.agent.buffer import Outbox, merge_reports


def rep(seq, nodes="n", workloads="w", lat=None, reachable=True):
    return {
        "seq": seq,
        "ts": float(seq),
        "reachable": reachable,
        "error": None if reachable else "down",
        "nodes": None if nodes is None else [{"name": f"{nodes}{seq}"}],
        "workloads": None if workloads is None else [{"name": f"{workloads}{seq}"}],
        "latencies": lat or {},
    }


def test_merge_newer_wins_and_keeps_what_only_the_older_has():
    older = rep(1, lat={"kb": 1.0, "edge-1": 9.0})
    newer = rep(2, nodes=None, workloads=None, lat={"kb": 2.0}, reachable=False)
    merged = merge_reports(older, newer)
    assert merged["seq"] == 2 and merged["reachable"] is False and merged["error"] == "down"
    assert merged["nodes"] == older["nodes"] and merged["workloads"] == older["workloads"]
    assert merged["latencies"] == {"kb": 2.0, "edge-1": 9.0}
    assert merge_reports(newer, older) == merged  # argument order does not matter


def test_outbox_is_fifo():
    box = Outbox(5)
    for seq in (1, 2, 3):
        box.push(rep(seq))
    assert [box.pop()["seq"] for _pop in range(3)] == [1, 2, 3]
    assert box.peek() is None and len(box) == 0


def test_full_outbox_compacts_the_oldest_and_keeps_the_newest_exact():
    box = Outbox(3)
    for seq in range(1, 8):
        box.push(rep(seq, lat={f"peer{seq}": float(seq)}))
    items = list(box)
    assert len(items) == 3 and box.compacted == 4
    assert [r["seq"] for r in items] == [5, 6, 7]
    assert items[1] == rep(6, lat={"peer6": 6.0}) and items[2] == rep(7, lat={"peer7": 7.0})
    # the compacted head carries every latency key seen in the reports folded into it
    assert items[0]["latencies"] == {f"peer{s}": float(s) for s in range(1, 6)}
    assert items[0]["nodes"] == [{"name": "n5"}]


def test_outbox_survives_a_restart(tmp_path):
    path = tmp_path / "outbox.json"
    box = Outbox(4, path)
    for seq in (10, 11, 12):
        box.push(rep(seq))
    box.pop()
    # a pop is saved only by save(): a crash before it means a harmless resend
    assert [r["seq"] for r in Outbox(4, path)] == [10, 11, 12]
    box.save()
    again = Outbox(4, path)
    assert [r["seq"] for r in again] == [11, 12]
    smaller = Outbox(2, path)
    assert len(smaller) == 2


def test_unreadable_outbox_file_is_discarded(tmp_path):
    path = tmp_path / "outbox.json"
    path.write_text(json.dumps({"not": "a list"}))
    assert len(Outbox(4, path)) == 0


def test_capacity_below_two_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        Outbox(1)


def test_an_unwritable_outbox_file_keeps_buffering_in_memory(tmp_path):
    box = Outbox(3, tmp_path / "gone" / "outbox.json")
    box.push(rep(1))
    box.push(rep(2))
    assert [r["seq"] for r in box] == [1, 2]
