# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options of the modules that ask the placement engine for a plan (argument spec: PLAN_ARGSPEC
in module_utils/args_common.py)."""

from __future__ import annotations


class ModuleDocFragment:
    """How a plan is computed, so placement and deploy document it the same way."""

    DOCUMENTATION = r"""
options:
  scorer:
    description:
      - How clusters are ranked. V(weighted) is the default objective, V(borda) is QONNECT's original
        Borda count, V(optimal) solves the whole assignment as a MILP with HiGHS.
    type: str
    choices: [weighted, borda, optimal]
    default: weighted
  exclude:
    description:
      - Clusters not to use, for example a failed or drained cluster.
      - Each must be a cluster of the inventory (the KB's, or the placement module's given inventory).
      - An unknown name is an error naming it and the known clusters, and nothing is stored or applied.
      - A controller's fenced run is not checked (its exclusions are its own decisions').
    type: list
    elements: str
    default: []
  hysteresis:
    description:
      - Keep a service on its current cluster unless another beats it by more than this fraction.
    type: float
    default: 0.1
notes:
  - The plan options take effect where a plan is computed; M(qonnect.core.deploy) computes none when
    given a O(qonnect.core.deploy#module:plan).
"""
