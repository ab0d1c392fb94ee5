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

_CONTROLLER = str(Path(__file__).resolve().parents[2] / "controller")
if importlib.util.find_spec("qonnect") is None:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_CONTROLLER, os.environ.get("PYTHONPATH")) if p)
# Always first on the path: pytest puts tests/unit there (for this conftest), where the folder
# tests/unit/qonnect would otherwise pass for a namespace package of that name ahead of an
# editable install, whose finder Python asks only after the path.
sys.path.insert(0, _CONTROLLER)
# tests/support (shared test helpers: `import support`), also under `ansible-test units`
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
