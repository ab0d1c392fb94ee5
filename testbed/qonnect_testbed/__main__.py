"""``python -m qonnect_testbed``: the testbed's CLI on its own (see qonnect_testbed.cli.main)."""

import sys

from qonnect_testbed.cli import main

sys.exit(main())
