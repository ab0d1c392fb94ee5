"""Import the qonnect package from this checkout when it is not installed.

`make setup` installs it into the project venv; `ansible-test units --venv` builds its own venv
from tests/unit/requirements.txt, where the package is not installed, so the tests (and the
Python subprocesses some of them start) import it from controller/ beside the collection.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

if importlib.util.find_spec("qonnect") is None:
    _CONTROLLER = str(Path(__file__).resolve().parents[2] / "controller")
    sys.path.insert(0, _CONTROLLER)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_CONTROLLER, os.environ.get("PYTHONPATH")) if p)
