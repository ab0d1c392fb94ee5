"""How long a migration may take: its deploy's readiness wait and the run around it.

The deploy's wait has one home (``k8s.deployer.DEFAULT_WAIT_TIMEOUT``, the module's and the
playbooks' default); the controller hands its ``--wait-timeout`` to every run and gives the
executor that much plus RUN_OVERHEAD, so a run is never stopped while its deploy still waits.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import DEFAULT_WAIT_TIMEOUT

__all__ = ["DEFAULT_WAIT_TIMEOUT", "OWN_VARS", "RUN_OVERHEAD", "run_timeout_for"]

# what a migration run needs besides its deploy's readiness wait: ansible start-up, discovery,
# apply, fence checks, address switch and prune, on a loaded host
RUN_OVERHEAD = 300.0

# migration variables the controller sets from its own options (an --extra-var may not override
# them: the run's time limit and the detector's judgement must match what the playbook does)
OWN_VARS = {
    "wait_timeout": "use --wait-timeout",
    "hysteresis": "use --hysteresis",
    "scorer": "migrations re-plan with the scorer the detector judges drift with",
}


def run_timeout_for(wait_timeout: float) -> float:
    """The executor's limit for a run whose deploy waits ``wait_timeout`` seconds."""
    return wait_timeout + RUN_OVERHEAD
