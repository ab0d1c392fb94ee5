"""What one replica is configured with (cli.py builds it from the command line), and what every
migration run it starts is told."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from qonnect.controller.detector import Settings
from qonnect.controller.raft import Timing
from qonnect.controller.survival import EVERY
from qonnect.controller.timeouts import DEFAULT_WAIT_TIMEOUT, RUN_OVERHEAD


def default_concurrency() -> int:
    """Playbook runs at once by default: one per two cores (each run costs ~5 CPU-s and 180 MiB;
    more at once only share the CPU and all finish late together)."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass
class Config:
    """Everything one replica needs; built by cli.py from the command line."""

    self_addr: str
    peers: list[str]
    kb_url: str
    token: str
    token_file: str
    secret: str
    data_dir: str
    playbook: str
    http_host: str = "127.0.0.1"
    http_port: int = 0
    tick: float = 1.0
    commit_timeout: float = 3.0
    max_attempts: int = 4
    backoff: float = 2.0
    defer_max: float = 60.0  # longest wait between checks of an unplaceable application
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT  # each migration's deploy waits this long for readiness
    run_timeout: float = DEFAULT_WAIT_TIMEOUT + RUN_OVERHEAD  # a whole run: the wait plus the rest
    settings: Settings = field(default_factory=Settings)
    timing: Timing = field(default_factory=Timing)
    extravars: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the operator's name for this replica (--id); Raft knows it by self_addr
    max_concurrent_runs: int = field(default_factory=default_concurrency)  # playbook runs at once
    batch_size: int = 50  # applications one run migrates (one playbook start, one deploy process)
    max_drift_moves_per_minute: float = 2.0  # QoS-drift moves admitted per minute (calm failback)
    intent_ttl: float = DEFAULT_WAIT_TIMEOUT + RUN_OVERHEAD  # a deploy's 'applying' intent holds this long
    rollback: bool = True  # a version failing on max_version_failures clusters rolls back
    survivability_every: float = EVERY  # seconds between survivability checks (0: off; survival.py)
    survive_labels: tuple[str, ...] = ()  # label keys whose every value is a failure scenario


def migration_vars(cfg: Config) -> dict[str, Any]:
    """Variables of every migration run, plus the operator's extra vars. A run applies the plan
    committed with its attempt; without one (no placement engine in the controller) it places
    with the hysteresis the detector judged drift with and the user's stored scorer (no scorer
    is forced here: the deploy module's default applies when the user stored none)."""
    return {
        **cfg.extravars,
        "hysteresis": cfg.settings.hysteresis,
        "wait_timeout": cfg.wait_timeout,
    }
