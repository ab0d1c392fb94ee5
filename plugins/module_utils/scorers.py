# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scorer names a user may pick (module option, CLI, controller), in one place. Light on
purpose (no numpy): argument specs import it. The engine maps each name to its implementation
(placement/engine.py); a test checks the two agree."""

from __future__ import annotations

SCORERS = ("weighted", "borda", "optimal")
DEFAULT_SCORER = "weighted"
