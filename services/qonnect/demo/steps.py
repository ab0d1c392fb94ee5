"""The five steps of QONNECT's evaluation, one function each, played on a running Stack.

Every step acts for real (``ansible-playbook``, ``testbed fail``, SIGKILL), then polls the KB
(and the replicas' status endpoints) until the expected state is reached or its deadline
passes, printing what it sees. A step returns the one line for the summary table or raises
StepFailed.
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

from qonnect.demo.progress import StepFailed, say, wait_until, watch
from qonnect.demo.stack import Stack

APP = "bookinfo"
CALM_WINDOW = 20.0  # step 5: seconds the placement must stay put after the recovery


class Story:
    """What the steps share: the stack, the KB, and the newest event already shown."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.kb = stack.admin
        self.last_event = max([e["id"] for e in self.kb.list_events(limit=1)] or [0])
        self.failed: list[str] = []

    def new_events(self) -> list[dict[str, Any]]:
        """Events about the app since the last call, each printed once as it arrives."""
        events = self.kb.list_events(after_id=self.last_event, limit=500)
        for e in events:
            self.last_event = max(self.last_event, e["id"])
            if e.get("application") in (APP, None) and not e["type"].startswith("agent."):
                where = f" {e['cluster']}" if e.get("cluster") else ""
                say(
                    f"    event {e['type']}{where} [{e.get('reason') or '-'}]: {_short(e.get('message', ''))}"
                )
        return events

    def placement(self) -> dict[str, list[str]]:
        """service -> clusters, from the KB's current placement."""
        record = self.kb.get_placement(APP)
        current = current_placement(record)
        return {svc: sorted(t["cluster"] for t in targets) for svc, targets in current.items()}

    def health(self, avoid: frozenset[str] | set[str] = frozenset()) -> tuple[bool, str]:
        """Every service placed off ``avoid`` and Healthy there (agents' reports), with a summary."""
        placement = self.placement()
        workloads = self.kb.list_workloads(application=APP)
        parts, ok = [], bool(placement)
        for svc, clusters in sorted(placement.items()):
            for cluster in clusters:
                states = {
                    w["status"] for w in workloads if w.get("service") == svc and w["cluster"] == cluster
                }
                state = "Healthy" if states == {"Healthy"} else "/".join(sorted(states)) or "not reported"
                ok = ok and state == "Healthy" and cluster not in avoid
                parts.append(f"{svc}@{cluster} {state}")
        return ok, ", ".join(parts) or "no placement yet"


def _short(text: str, width: int = 150) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _where(placement: dict[str, list[str]]) -> str:
    return ", ".join(f"{svc}->{'+'.join(c)}" for svc, c in placement.items())


def _moved(before: dict[str, list[str]], after: dict[str, list[str]]) -> str:
    moves = [
        f"{s} {'+'.join(before.get(s, []))}->{'+'.join(c)}" for s, c in after.items() if before.get(s) != c
    ]
    return ", ".join(moves) or "nothing moved"


def _engine():
    from ansible_collections.qonnect.core.plugins.module_utils.placement import engine
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

    return engine, Application


def explain(story: Story) -> None:
    """Why each service is where it is: the placement engine's explanation for the stored spec
    and the KB's inventory, keeping the current placement (as the deploy module planned it)."""
    engine, application = _engine()
    app = application.from_dict(story.kb.get_application(APP)["application"])
    inventory = story.kb.inventory()
    record = story.kb.get_placement(APP)
    plan = engine.place(app, inventory, current=current_placement(record), explain=True)
    say(f"  why (engine objective {plan.objective:.3f}; weights normalised):")
    for svc, rows in plan.explanation.items():
        eligible = [r for r in rows if r["eligible"]]
        rejected = [r for r in rows if not r["eligible"]]
        if not eligible:
            continue
        best = eligible[0]
        crit = ", ".join(f"{k} {v['score']:.2f}x{v['weight']:.2f}" for k, v in best["criteria"].items())
        others = ", ".join(f"{r['cluster']} {r['total']:.3f}" for r in eligible[1:])
        reasons = sorted({r["reason"] for r in rejected})
        say(f"    {svc:<12} {best['cluster']:<8} total {best['total']:.3f} ({crit})")
        say(f"    {'':<12} next: {others or 'none'}; {len(rejected)} rejected ({'; '.join(reasons)[:90]})")


def objective_of(story: Story, placement: dict[str, list[str]]) -> float:
    """The stored spec's objective for a placement (one replica per listed cluster)."""
    engine, application = _engine()
    app = application.from_dict(story.kb.get_application(APP)["application"])
    services = {svc: [{"cluster": c, "replicas": 1} for c in clusters] for svc, clusters in placement.items()}
    return engine.objective(app, story.kb.inventory(), {"services": services})


def step1_deploy(story: Story) -> str:
    """Deploy Bookinfo energy-first with the deploy playbook; show where and why."""
    spec = story.stack.collection / "examples" / "bookinfo" / "energy-first.yml"
    engine = story.stack.engine
    output = story.stack.playbook(
        "deploy-energy-first", "deploy", app_file=str(spec), wait_timeout=f"{engine.deploy_wait:g}"
    )
    for line in output.splitlines():
        if '"msg":' in line:
            say(f"    {line.strip()}")
    t0 = time.monotonic()
    wait_until(story.health, engine.placed_healthy, "every service Healthy where it was placed", t0)
    story.new_events()
    placement = story.placement()
    say(f"  placed: {_where(placement)}")
    explain(story)
    if set(placement) != {"productpage", "details", "reviews", "ratings"}:
        raise StepFailed(f"expected the four Bookinfo services placed, got {sorted(placement)}")
    return f"energy-first: {_where(placement)}"


def step2_cost_first(story: Story) -> str:
    """Store the cost-first spec in the KB; the controller re-places Bookinfo (spec-changed)."""
    stack = story.stack
    # The leader must have recorded the deployed spec version, or it would take the new one as
    # the first it sees (observe) instead of a change.
    wait_until(lambda: _observed(story), 30, "the controller to record the deployed spec version")
    before = story.placement()
    spec = stack.collection / "examples" / "bookinfo" / "cost-first.yml"
    token = (stack.tokens / "admin.token").read_text().strip()
    stack.ansible(
        "store-cost-first",
        ["ansible", "localhost", "-m", "qonnect.core.application", "-a", f"src={spec}"],
        extra_env={"QONNECT_KB_URL": stack.state["kb_url"], "QONNECT_KB_TOKEN": token},
    )
    t0 = time.monotonic()
    say("  the controller sees the new spec version and re-places the application:")

    done: list[dict[str, Any]] = []

    def rescheduled() -> tuple[bool, str]:
        done.extend(
            e
            for e in story.new_events()
            if e["type"] == "controller.migration.succeeded" and e.get("reason") == "spec-changed"
        )
        ok, state = story.health()
        return bool(ok and done and story.placement() != before), state

    wait_until(rescheduled, stack.engine.heal, "the re-placement to be Healthy", t0)
    after = story.placement()
    old, new = objective_of(story, before), objective_of(story, after)
    say(f"  moved: {_moved(before, after)}")
    say(f"  cost-first objective: {old:.3f} with the old placement -> {new:.3f} now")
    explain(story)
    if new <= old:
        raise StepFailed(
            f"the new placement does not serve the cost-first goals better ({old:.3f} -> {new:.3f})"
        )
    return f"spec-changed: {_moved(before, after)}; objective {old:.3f}->{new:.3f}"


def _observed(story: Story) -> tuple[bool, str]:
    """The leader's replicated log holds the deployed spec version (the commit index alone also
    moves for the leader's own entries, e.g. its fencing token)."""
    leader = story.stack.leader()
    if not leader:
        return False, "no leader"
    version = (leader["status"].get("versions") or {}).get(APP)
    return version is not None, f"leader {leader['id']} has recorded version {version} of {APP}"


def fail_and_heal(story: Story, cluster: str) -> tuple[str, str, list[dict[str, Any]]]:
    """`testbed fail` a cluster, then wait until every service is Healthy off the failed ones.

    Returns what moved, the timeline (decision, playbook done, healthy: seconds after the
    failure, from the KB's event times) and the controller's events about it.
    """
    before, mark, t0 = story.placement(), story.last_event, time.monotonic()
    story.stack.testbed("fail", cluster)  # returns once the cluster's listener is closed
    failed_at = time.time()
    story.failed.append(cluster)
    say(f"  {cluster} failed (its API now refuses connections); waiting for the controller")

    finished: list[dict[str, Any]] = []
    decisions: set[str] = set()  # the decisions that exclude this cluster

    def healed() -> tuple[bool, str]:
        # Make-before-break: services turn Healthy elsewhere before the playbook returns, so wait
        # for the controller to record this failure's migration outcome too (a new leader may first
        # confirm an earlier migration's success, whose decision did not exclude this cluster).
        for e in story.new_events():
            ref = e.get("ref") or {}
            if e["type"] == "controller.decision" and cluster in (ref.get("exclude") or []):
                decisions.add(str(ref.get("id")))
            elif e["type"] == "controller.migration.succeeded" and str(ref.get("id")) in decisions:
                finished.append(e)
        ok, state = story.health(avoid=set(story.failed))
        return bool(ok and finished), state if finished else f"{state}; migration not finished yet"

    wait_until(healed, story.stack.engine.heal, f"every service Healthy off {', '.join(story.failed)}", t0)
    healthy = time.time() - failed_at
    events = [
        e
        for e in story.kb.list_events(after_id=mark, application=APP, limit=500)
        if e["type"].startswith("controller.")
    ]
    marks = [
        (
            label,
            next(
                (
                    e["ts"] - failed_at
                    for e in events
                    if e["type"] == etype and (e.get("reason") == "hedge") == hedge
                ),
                None,
            ),
        )
        for label, etype, hedge in (
            ("standby decided", "controller.decision", True),  # hedged failover (issue 36)
            ("standby Ready", "controller.migration.succeeded", True),
            ("move confirmed", "controller.decision", False),
            ("move done", "controller.migration.succeeded", False),
        )
    ]
    timeline = ", ".join(f"{label} +{sec:.1f}s" for label, sec in marks if sec is not None)
    timeline = f"{timeline + ', ' if timeline else ''}all Healthy +{healthy:.1f}s"
    moved = _moved(before, story.placement())
    say(f"  healed: {moved}; {timeline}")
    return moved, timeline, events


def step3_failover(story: Story) -> str:
    """Fail the cluster that runs productpage; the controller moves it elsewhere."""
    cluster = story.placement()["productpage"][0]
    moved, timeline, _events = fail_and_heal(story, cluster)
    if cluster in story.placement()["productpage"]:
        raise StepFailed(f"productpage is still placed on the failed cluster {cluster}")
    return f"{cluster} failed: {moved}; {timeline}"


def step4_leader_crash(story: Story) -> str:
    """SIGKILL the leading replica; a new leader is elected and heals the next failure."""
    from qonnect.controller import journal

    stack = story.stack
    old = stack.leader()
    if old is None:
        raise StepFailed("no controller replica reports itself leader")
    term = old["status"]["term"]
    say(f"  leader is {old['id']} (term {term}); SIGKILL")
    t0 = time.monotonic()
    stack.kill(f"controller-{old['id']}")
    others = [r for r in stack.state["replicas"] if r["id"] != old["id"]]

    def elected() -> tuple[Any, str]:
        new = stack.leader(others)
        states = ", ".join(
            f"{r['id']} {(stack.replica_status(r) or {}).get('state', 'down')}" for r in others
        )
        return (new if new and new["status"]["term"] > term else None), states

    new = wait_until(elected, 30, "a new leader", t0, interval=0.1)
    election = time.monotonic() - t0
    say(f"  {new['id']} leads term {new['status']['term']} after {election:.1f}s")
    target = next(
        (
            c
            for svc in ("details", "reviews", "ratings")
            for c in story.placement()[svc]
            if c not in story.failed
        ),
        None,
    )
    if target is None:
        raise StepFailed("no healthy cluster runs a service any more")
    moved, timeline, events = fail_and_heal(story, target)
    terms = [e["ref"]["term"] for e in events if e["type"] == journal.SUCCEEDED and journal.trusted(e)]
    if not terms or max(terms) <= term:
        raise StepFailed(
            f"expected a migration with the new leader's token (term > {term}), got terms {terms}"
        )
    say(
        f"  the healing ran with the new leader's fencing term {max(terms)}; restarting {old['id']} (it rejoins as a follower)"
    )
    replica = next(r for r in stack.state["replicas"] if r["id"] == old["id"])
    stack.start_replica(replica)
    stack.wait_replica(replica)
    return f"{old['id']} killed, {new['id']} elected in {election:.1f}s; {target} failed: {moved}; {timeline}"


def step5_recover(story: Story) -> str:
    """Recover the failed clusters; nothing moves while they come back."""
    stack = story.stack
    t0 = time.monotonic()
    for cluster in story.failed:
        stack.testbed("recover", cluster)
    say(f"  recovered {', '.join(story.failed)}; waiting for their agents to report them healthy")

    def back() -> tuple[bool, str]:
        clusters = {c["name"]: c.get("healthy") for c in story.kb.inventory()["clusters"]}
        return all(clusters.get(c) for c in story.failed), ", ".join(
            f"{c} {'healthy' if clusters.get(c) else 'down'}" for c in story.failed
        )

    wait_until(back, stack.engine.recovered, "the recovered clusters to be healthy", t0)
    story.new_events()
    placement = story.placement()
    say(f"  watching the placement for {CALM_WINDOW:g}s: {_where(placement)}")
    changes: list[dict[str, Any]] = []

    def calm() -> str:
        events = story.new_events()
        changes.extend(e for e in events if e["type"].startswith("controller.decision"))
        now = story.placement()
        if now != placement:
            raise StepFailed(f"the placement changed after the recovery: {_moved(placement, now)}")
        return "unchanged; " + story.health()[1]

    calm_start = time.monotonic()
    watch(CALM_WINDOW, calm, calm_start)
    ok, state = story.health()
    if changes:
        raise StepFailed(f"the controller decided again after the recovery: {changes[0]['message'][:200]}")
    if not ok:
        raise StepFailed(f"not every service is Healthy after the recovery: {state}")
    say(f"  no decision, no move for {time.monotonic() - calm_start:.0f}s; every service Healthy")
    say(
        "  (once a recovered cluster has been stable for 30 s the controller may move a service back to it"
        " if that beats the current placement by more than the hysteresis: one deliberate QoS move)"
    )
    recovered = ", ".join(story.failed)
    story.failed.clear()
    return f"{recovered} back; placement unchanged for {CALM_WINDOW:g}s, no new decision"


STEPS = [
    ("1 deploy energy-first", step1_deploy),
    ("2 switch to cost-first", step2_cost_first),
    ("3 fail productpage's cluster", step3_failover),
    ("4 kill the leader, fail again", step4_leader_crash),
    ("5 recover, no flapping", step5_recover),
]
