"""Import the qonnect package from this checkout when it is not installed.

`make setup` installs it into the project venv; `ansible-test units --venv` builds its own venv
from tests/unit/requirements.txt, where the package is not installed, so the tests import it from
controller/ beside the collection.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("qonnect") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "controller"))
