"""``python -m qonnect``: the same entry point as the ``qonnect`` command."""

import sys

from qonnect.cli import main

sys.exit(main())
