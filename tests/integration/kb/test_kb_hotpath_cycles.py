"""The report short path leaves no garbage that only the cycle collector can free (with the KB
integration tests: it imports uvicorn's httptools protocol, which ansible-test units lacks).

Thousands of reports per second each leaving a reference cycle filled the young generation, and
its collections (tens of milliseconds with the GIL held at that rate) were the KB's tail latency.
"""

from __future__ import annotations

import gc

from qonnect.kb import hotpath


def test_a_reports_cycle_stand_in_is_freed_by_reference_counting():
    """Judged by what the cycle collector finds of the stand-in itself, not by its total: other
    threads of the process (an xdist worker's channel, a previous test's clients) may leave their
    own garbage in between."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage, not freed
    try:
        pending = hotpath._Pending(keep_alive=True)
        pending.message_event.set()  # what uvicorn calls on it
        del pending
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, hotpath._Pending)]
        assert left == [], f"{len(left)} stand-in(s) needed the cycle collector"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
