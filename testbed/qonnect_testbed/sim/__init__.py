"""Simulation controllers of one emulated cluster: nodes, scheduler, kubelet, Deployments.

They run as asyncio tasks beside the cluster's API server, react to the Store's change events
and to timers, and change objects only through the Store's ordinary methods - the way real
controllers change a cluster only through its API. ``ClusterSim`` wires them together.
"""

from __future__ import annotations

from qonnect_testbed.sim.cluster import ClusterSim

__all__ = ["ClusterSim"]
