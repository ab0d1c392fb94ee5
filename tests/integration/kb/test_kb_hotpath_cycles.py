"""The report short path leaves no garbage that only the cycle collector can free (with the KB
integration tests: it imports uvicorn's httptools protocol, which ansible-test units lacks).

Thousands of reports per second each leaving a reference cycle filled the young generation, and
its collections (tens of milliseconds with the GIL held at that rate) were the KB's tail latency.
"""

from __future__ import annotations

import gc

from qonnect.kb import hotpath


def test_a_reports_cycle_stand_in_is_freed_by_reference_counting():
    gc.collect()
    gc.disable()
    try:
        pending = hotpath._Pending(keep_alive=True)
        pending.message_event.set()  # what uvicorn calls on it
        del pending
        assert gc.collect() == 0
    finally:
        gc.enable()
