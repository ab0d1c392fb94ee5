"""The demo's two testbed engines and the timing each needs.

The emulator answers in milliseconds; the real engine (``qonnect testbed up --engine kube``)
runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler per cluster, so starting,
deploying, detecting and recovering all take longer. Both play QONNECT's nine-cluster ``paper``
profile: nine real clusters need about 4.2 GiB of memory and start in about a minute on two busy
cores (docs/demo.md, "The real engine").
"""

from __future__ import annotations

from dataclasses import dataclass

PROFILE = "paper"


@dataclass(frozen=True)
class Engine:
    """Seconds the demo allows for each kind of wait on one engine (deadlines, not sleeps)."""

    name: str
    what: str  # one line for the set-up header
    start_delay: float  # testbed: binding a pod -> Running and Ready
    testbed_up: float  # `qonnect testbed up` until every cluster answers
    testbed_control: float  # `qonnect testbed fail/recover/down`
    agents_healthy: float  # every agent's first report
    deploy_wait: float  # the deploy playbook's wait_timeout
    placed_healthy: float  # after deploy: every service Healthy where placed
    heal: float  # a failure (or a new spec) -> every service Healthy elsewhere
    recovered: float  # a recovered cluster reported healthy again


EMULATOR = Engine(
    name="emulator",
    what="nine emulated clusters in one process",
    start_delay=0.5,
    testbed_up=180.0,
    testbed_control=120.0,
    agents_healthy=90.0,
    deploy_wait=90.0,
    placed_healthy=90.0,
    heal=150.0,
    recovered=60.0,
)

# Measured on two shared cores (load 13-28): nine clusters up in 49-53 s, an API server back in
# ~6 s, a pod Ready ~2 s after binding. The deadlines are several times that: a busy CI machine
# is slower, and a migration on real clusters also waits for namespaces to terminate.
KUBE = Engine(
    name="kube",
    what=(
        "nine real control planes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; "
        "~470 MiB each) with simulated kubelets"
    ),
    start_delay=2.0,
    testbed_up=600.0,
    testbed_control=180.0,
    agents_healthy=180.0,
    deploy_wait=180.0,
    placed_healthy=180.0,
    heal=300.0,
    recovered=180.0,
)

ENGINES = {e.name: e for e in (EMULATOR, KUBE)}
