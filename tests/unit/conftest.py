"""Import the qonnect package from this checkout when it is not installed.

`make setup` installs it into the project venv; `ansible-test units --venv` builds its own venv
from tests/unit/requirements.txt, where the package is not installed, so the tests (and the
Python subprocesses some of them start) import it from services/ and testbed/ beside the collection.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
_SERVICES = str(_ROOT / "services")
_TESTBED = str(_ROOT / "testbed")
if importlib.util.find_spec("qonnect") is None or importlib.util.find_spec("qonnect_testbed") is None:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_SERVICES, _TESTBED, os.environ.get("PYTHONPATH")) if p
    )
# Under `ansible-test units` the collection is a copy at <base>/ansible_collections/qonnect/core and
# only ansible-test's loader finds it; plain Python subprocesses get <base> on their path (in the
# project venv the collection is in site-packages, services/setup.py).
if _ROOT.parent.parent.name == "ansible_collections":
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_ROOT.parents[2]), os.environ.get("PYTHONPATH")) if p
    )
# Always first on the path: pytest puts tests/unit there (for this conftest), where the folder
# tests/unit/qonnect would otherwise pass for a namespace package of that name ahead of an
# editable install, whose finder Python asks only after the path.
sys.path.insert(0, _SERVICES)
sys.path.insert(1, _TESTBED)
# tests/support (shared test helpers: `import support`), also under `ansible-test units`
sys.path.insert(2, str(Path(__file__).resolve().parents[1]))
