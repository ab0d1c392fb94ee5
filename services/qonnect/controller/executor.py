"""Runs playbooks/migrate.yml for one attempt of a committed decision, through ansible-runner.

Each attempt gets its own private data dir (kept, so the artifacts tell what happened). Secrets
never go into extra vars or environment variables (the runner's ``command`` artifact records
the environment): the playbook gets the *path* of the KB token file. The run is cancelled as
soon as ``still_valid()`` turns false (the leader lost its term), so a deposed leader stops:
every process of the run is killed, wherever it moved (see proctree), not only its process
group. The playbook also checks the KB fence before each cluster-changing step.

A batch (``run_batch``) migrates several decisions' applications in one run: one Ansible
start-up (~5 CPU-s, 180 MiB) instead of one per application, and one deploy module process for
all of them (its ``batch`` option: their cluster work runs in parallel on its threads); each
keeps its own attempt and token, and its own outcome in the task's result.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qonnect.controller import proctree
from qonnect.controller.hedging import HEDGE
from qonnect.controller.statemachine import Decision

log = logging.getLogger(__name__)

SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"


def default_playbook() -> str:
    """playbooks/migrate.yml of the installed qonnect.core collection."""
    from ansible_collections.qonnect import core

    return str(Path(next(iter(core.__path__))) / "playbooks" / "migrate.yml")


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended."""

    result: str  # succeeded | failed | cancelled
    detail: str
    artifacts: str
    rc: int | None


@dataclass
class Executor:
    """Configuration shared by every run."""

    playbook: str
    runs_dir: str
    kb_url: str
    token_file: str
    timeout: float = 300.0
    extra: dict[str, Any] | None = None  # extra vars added to every run (e.g. kb_ca_path)
    owner: str = ""  # this replica's process-tree owner id (proctree); set by the controller

    def mark(self, ident: str) -> str:
        return f"{self.owner or 'unowned'}/{ident}"

    def kill_all(self) -> int:
        """Kill every process of every run of this replica (shutdown)."""
        return proctree.kill_marked(f"{self.owner or 'unowned'}/")

    def run(
        self, decision: Decision, attempt: int, token: dict[str, int], still_valid: Callable[[], bool]
    ) -> Outcome:
        """Run the playbook once for one decision; never raises for a failing playbook."""
        ident = f"{decision['id']}-a{attempt}"
        extravars = dict(self.extra or {})
        extravars.update(decision_vars(decision, attempt, token))
        extravars.pop("attempt", None)
        log.info(
            "decision %s attempt %d: running %s for %s (token %s)",
            decision["id"],
            attempt,
            os.path.basename(self.playbook),
            decision["app"],
            token,
        )
        return self._invoke(ident, extravars, still_valid, f"decision {decision['id']} attempt {attempt}")[0]

    def run_batch(
        self, items: list[tuple[Decision, int, dict[str, int]]], still_valid: Callable[[], bool]
    ) -> dict[str, Outcome]:
        """One playbook run migrating several decisions' applications (one start-up and one
        deploy module process for all; their cluster work runs in parallel on its threads, all
        of the batch at once: --batch-size bounds it, and each application's deploy mostly waits
        on the KB and the clusters' APIs; 50 took 4.4 s ten at a time, 2.3 s at once).
        Each decision keeps its own attempt and fencing token; returns an outcome per decision."""
        first = items[0][0]
        ident = f"{first['id']}-batch{len(items)}-a{items[0][1]}"
        extravars = dict(self.extra or {})
        extravars["batch"] = [decision_vars(d, a, t) for d, a, t in items]
        extravars.setdefault("batch_workers", len(items))  # --extra-var batch_workers=N sets it
        apps = ", ".join(d["app"] for d, _a, _t in items)
        log.info(
            "batch %s: running %s for %d applications: %s",
            ident,
            os.path.basename(self.playbook),
            len(items),
            apps,
        )
        whole, runner = self._invoke(ident, extravars, still_valid, f"batch {ident}")
        return split_outcome(whole, items, batch_results(runner))

    def _invoke(
        self,
        ident: str,
        extravars: dict[str, Any],
        still_valid: Callable[[], bool],
        what: str,
    ) -> tuple[Outcome, Any]:
        """One ansible-runner run: its outcome and the runner (None if it could not start)."""
        import ansible_runner

        pdd = Path(self.runs_dir) / ident
        if pdd.exists():  # a retry of the same attempt number by a restarted leader
            shutil.rmtree(pdd)
        pdd.mkdir(parents=True, mode=0o700)
        extravars["kb_url"], extravars["kb_token_file"] = self.kb_url, self.token_file
        # The deploy runs as a module process, not in the task's process (plugins/action/deploy.py):
        # a run that fast can complete on an isolated leader between losing its quorum and the new
        # leader's fence, and then be run again by the new leader (a duplicate migration, seen by
        # test_isolated_leader_does_not_complete_the_migration). Until the leader stops on a lost
        # quorum before it writes, its runs keep the module's pace.
        extravars.setdefault("qonnect_in_process", False)
        bindir = os.path.dirname(sys.executable)
        envvars = {
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            proctree.MARK: self.mark(ident),
        }
        if os.environ.get("ANSIBLE_COLLECTIONS_PATH"):
            envvars["ANSIBLE_COLLECTIONS_PATH"] = os.environ["ANSIBLE_COLLECTIONS_PATH"]
        cancelled = threading.Event()

        def cancel() -> bool:
            if not cancelled.is_set() and not still_valid():
                cancelled.set()
                killed = proctree.kill_marked(self.mark(ident))  # at once, not at the runner's pace
                log.warning("%s cancelled: killed %d process(es)", what, killed)
            return cancelled.is_set()

        try:
            runner = proctree.run_niced(  # migrations below the replica's CPU priority (issue 21)
                ansible_runner.run,
                private_data_dir=str(pdd),
                playbook=self.playbook,
                ident="run",
                extravars=extravars,
                envvars=envvars,
                quiet=True,
                cancel_callback=cancel,
                timeout=int(self.timeout),
                settings={"pexpect_timeout": 0.25},  # how often the cancel callback is polled
            )
        except Exception as exc:  # runner could not even start (missing playbook, bad dir)
            return Outcome(FAILED, f"ansible-runner could not run: {exc}", str(pdd), None), None
        finally:  # nothing of the run outlives it (timeout, cancel, a worker that setsid()ed)
            proctree.kill_marked(self.mark(ident))
        artifacts = str(pdd / "artifacts" / "run")
        if cancelled.is_set() or runner.status == "canceled":
            why = "cancelled: this replica lost its leadership term"
            return Outcome(CANCELLED, why, artifacts, runner.rc), runner
        if runner.status == "successful" and runner.rc == 0:
            return Outcome(SUCCEEDED, "playbook succeeded", artifacts, runner.rc), runner
        why = f"playbook {runner.status} (rc {runner.rc}): {_failure(runner)}"
        return Outcome(FAILED, why, artifacts, runner.rc), runner


def decision_vars(decision: Decision, attempt: int, token: dict[str, int]) -> dict[str, Any]:
    """What one decision's migration is told: the application, why, the plan committed with the
    attempt (applied as is: the deploy does not place again), and - for a run without a plan,
    which places itself - the clusters to avoid (the decision's and the user's stored
    exclusions) and the user's stored scorer and hysteresis."""
    policy = decision.get("policy") or {}
    out: dict[str, Any] = {
        "app": decision["app"],
        "reason": decision["reason"],
        "exclude": sorted(set(decision["exclude"]) | set(policy.get("exclude") or ())),
        "fencing": {"term": int(token["term"]), "seq": int(token["seq"])},
        "decision_id": decision["id"],
        "attempt": attempt,
    }
    for key in ("scorer", "hysteresis"):
        if policy.get(key) is not None:
            out[key] = policy[key]
    if decision.get("plan") is not None:  # the services mapping the leader committed
        out["plan"] = {"services": decision["plan"]}
        if decision.get("kind") == HEDGE:  # make the standby copies; the suspect cluster is not touched
            out["plan"]["hold"] = sorted(decision["exclude"])
    return out


def batch_results(runner: Any) -> dict[str, dict[str, Any]]:
    """decision id -> {ok, msg} from the batch task's result (migrate.yml deploys the whole
    batch in one deploy module run, which reports each item under ``batch.<decision id>``)."""
    found: dict[str, dict[str, Any]] = {}
    if runner is None:
        return found
    try:
        for event in runner.events:
            if event.get("event") not in ("runner_on_ok", "runner_on_failed"):
                continue
            res = (event.get("event_data") or {}).get("res") or {}
            if isinstance(res.get("batch"), dict):
                for did, item in res["batch"].items():
                    found[str(did)] = {"ok": bool(item.get("ok")), "msg": str(item.get("msg") or "")}
    except (OSError, ValueError):
        pass
    return found


def split_outcome(
    whole: Outcome,
    items: list[tuple[Decision, int, dict[str, int]]],
    per_host: dict[str, dict[str, Any]],
) -> dict[str, Outcome]:
    """Each decision's outcome from its host's result in the batch run; a decision without one
    (the run ended before its deploy did) gets the run's own outcome, never a success."""
    out = {}
    for decision, _attempt, _token in items:
        did = decision["id"]
        got = per_host.get(str(did))
        if whole.result == CANCELLED or got is None:
            out[did] = (
                whole
                if whole.result != SUCCEEDED
                else Outcome(
                    FAILED, "the batch run recorded no result for this application", whole.artifacts, whole.rc
                )
            )
        elif got.get("ok"):
            out[did] = Outcome(SUCCEEDED, "playbook succeeded (batch)", whole.artifacts, whole.rc)
        else:
            out[did] = Outcome(
                FAILED, f"batch: {str(got.get('msg') or 'failed')[:500]}", whole.artifacts, whole.rc
            )
    return out


def _failure(runner: Any) -> str:
    """The first failed task's message, for the decision's record."""
    try:
        for event in runner.events:
            if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
                data = event.get("event_data", {})
                res = data.get("res") or {}
                return f"task '{data.get('task', '?')}': {str(res.get('msg', ''))[:500]}"
    except (OSError, ValueError):
        pass
    return "see the run's stdout artifact"
