"""The one check that refuses a dependency outside its tested range (qonnect/versions.py),
as the controller's Raft transport uses it for pysyncobj (the KB's uvicorn check has its own
tests in kb/test_kb_uvicorn_version.py)."""

from __future__ import annotations

import pytest
from qonnect.controller.raft_config import TESTED_PYSYNCOBJ, RaftConfigError, check_pysyncobj_version
from qonnect.versions import require_tested


@pytest.mark.parametrize("installed", ["0.3.16", "0.3.18", "0.4.0", "1.0"])
def test_pysyncobj_outside_the_tested_range_is_refused_with_the_range_to_install(installed):
    with pytest.raises(RaftConfigError) as err:
        check_pysyncobj_version(installed)
    low, high = (".".join(map(str, v)) for v in TESTED_PYSYNCOBJ)
    assert f"pysyncobj {installed} is installed" in str(err.value)
    assert f"pip install 'pysyncobj>={low},<{high}'" in str(err.value)


def test_the_tested_pysyncobj_and_the_installed_one_pass():
    check_pysyncobj_version(".".join(map(str, TESTED_PYSYNCOBJ[0])))
    check_pysyncobj_version()


def test_a_missing_package_names_itself():
    with pytest.raises(LookupError, match="the tool needs the Python package no-such-package-qonnect"):
        require_tested("no-such-package-qonnect", ((0, 0, 0), (1, 0, 0)), LookupError, "the tool")
