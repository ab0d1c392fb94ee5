"""The table of bad specs (cases.py), in-process: every error named, nothing but QosSpecError,
within the time bound. No federation: the fast half of the adversarial suite (test_adversarial.py
runs the same table through the CLI and the deploy module)."""

from __future__ import annotations

import time

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.qos import QosSpecError, load_application_file
from cases import all_cases


@pytest.mark.parametrize("case", [c for c in all_cases() if not c.placement], ids=lambda c: c.id)
def test_adversarial_table_in_process(case, tmp_path):
    path = case.write(tmp_path)
    start = time.process_time()
    with pytest.raises(QosSpecError) as info:
        load_application_file(str(path), bundles={k: str(tmp_path / v) for k, v in case.bundles.items()})
    text = "\n".join(info.value.errors)
    for expected in case.expect:
        assert expected in text, text
    assert time.process_time() - start < 2.0
