"""The replicated decision log: a pure, deterministic state machine.

Every replica applies the same committed commands in the same order and so reaches the same
state. Nothing here reads the clock, the network or the random generator: the leader puts the
time and its term into each command. Commands are plain dicts (what goes over Raft), results are
plain dicts (what the proposer gets back).

Fencing: each accepted decision and each migration attempt gets a token ``(term, seq)``; ``seq``
grows by one for every token issued and ``term`` never decreases along the log, so tokens are
strictly increasing in log order. If every replica lost its log, Raft terms restart low: the
leader's first entry carries the newest term found in the KB (``kb_floor``) and token terms are
offset above it. The KB refuses placement writes carrying an older token than
the newest it has seen, so a deposed leader's late writes fail.

Commands carrying a term older than the newest term recorded in the log are refused: an old
leader's proposal that is committed through a newer leader's log does not act.
"""

from __future__ import annotations

import copy
from typing import Any, TypedDict

from ansible_collections.qonnect.core.plugins.module_utils.placement.binding import services_problems

# decisions kept after they end (in-flight ones are always kept)
HISTORY = 200

PENDING = "pending"  # committed, no attempt started yet
RUNNING = "running"  # an attempt is started by a leader (owner, attempt token)
RETRY = "retry"  # last attempt failed; may start again after not_before
SUCCEEDED = "succeeded"
FAILED = "failed"  # gave up after the last allowed attempt
CANCELLED = "cancelled"  # no longer needed (application removed, trigger gone)
TERMINAL = (SUCCEEDED, FAILED, CANCELLED)


class CommandError(ValueError):
    """A malformed command: names the field and what was expected."""


def _need(cmd: dict[str, Any], field: str, kind: type | tuple[type, ...]) -> Any:
    value = cmd.get(field)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise CommandError(f"{cmd.get('op')}: field '{field}' must be {getattr(kind, '__name__', kind)}")
    return value


# the commands one ``many`` entry may carry; the fields each command must have
BATCHABLE = ("start", "finish")
_FIELDS: dict[str, tuple[tuple[str, type], ...]] = {
    "decide": (("app", str), ("exclude", list), ("reason", str)),
    "start": (("id", str), ("node", str)),
    "finish": (("id", str), ("attempt", int), ("result", str)),
}


def _check(cmd: dict[str, Any], where: str) -> None:
    """Raise CommandError, naming ``where`` and the field, unless ``cmd`` (a decide, start or
    finish command) is well formed; a command alone and one in a batch entry are checked alike."""
    op = cmd["op"]
    for name, kind in _FIELDS[op]:
        value = cmd.get(name)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise CommandError(f"{where}: field '{name}' must be {kind.__name__}")
    if op == "start" and cmd.get("plan") is not None:
        problems = services_problems(cmd["plan"], "plan")  # the one validator of a plan (binding.py)
        if problems:
            raise CommandError(f"{where}: field 'plan' is not a plan: " + "; ".join(problems))
    if op == "finish" and cmd["result"] not in (SUCCEEDED, FAILED):
        raise CommandError(f"{where}: field 'result' must be succeeded or failed; got {cmd['result']!r}")


def _items(
    cmd: dict[str, Any], field: str, ops: tuple[str, ...], implied: str | None = None
) -> list[dict[str, Any]]:
    """The commands a batch entry carries in ``field`` (decide_many's decisions, many's
    commands), each with the entry's time and node and its op (``implied`` when the items name
    none), every one checked before any is applied: a bad item anywhere changes nothing."""
    where = cmd["op"]
    items = _need(cmd, field, list)
    defaults: dict[str, Any] = {k: cmd[k] for k in ("ts", "node") if k in cmd}
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise CommandError(f"{where}: field '{field}[{i}]' must be a dict")
        merged = {**defaults, **item, **({"op": implied} if implied else {})}
        if merged.get("op") not in ops:
            raise CommandError(f"{where}: field '{field}[{i}].op' must be one of {', '.join(ops)}")
        _check(merged, f"{where}: {field}[{i}]")
        out.append(merged)
    return out


class _DecisionFields(TypedDict):
    id: str
    app: str
    service: str | None
    kind: str  # what triggered it: cluster-down, qos-drift, spec-changed, ...
    reason: str
    exclude: list[str]  # clusters the move must avoid (re-read before each attempt)
    key: str
    pinned: list[str]
    token: dict[str, int]  # the decision's own fencing token {term, seq}
    node: str | None  # the replica that decided
    decided_at: float
    detected_at: float | None
    spec_version: int | None
    status: str  # PENDING, RUNNING, RETRY or one of TERMINAL
    attempts: int
    attempt_token: dict[str, int] | None  # the running (or last) attempt's token
    attempt_term: int
    owner: str | None  # the replica running the attempt
    not_before: float
    result: str | None
    detail: str
    artifacts: str | None
    ended_at: float | None


class Decision(_DecisionFields, total=False):
    """One decision as every replica holds it (issue 38, item 2: one typed record from the log to
    the executor, the KB journal and the status, so mypy checks every key that is read)."""

    plan: dict[str, list[dict[str, Any]]]  # the Binding's services the running attempt applies
    policy: dict[str, Any]  # the user's stored policy the attempt was planned with
    started_at: float
    deferrals: int


class DecisionLog:
    """The state every replica agrees on: decisions, in-flight migrations, fencing counters."""

    def __init__(self) -> None:
        self.seq = 0  # last issued fencing sequence number
        self.term = 0  # newest term seen in the log
        self.leader: str | None = None  # node of the newest 'leader' entry
        self.leader_since = 0.0
        self.last_token = {"term": 0, "seq": 0}
        self.offset = 0  # added to Raft terms in tokens, to stay above tokens the KB already holds
        self.decisions: dict[str, Decision] = {}
        self.order: list[str] = []  # decision ids, oldest first
        self.inflight: dict[str, str] = {}  # application -> decision id
        self.versions: dict[str, int] = {}  # application -> spec version last placed or observed
        self.counters: dict[str, int] = {
            "decisions": 0,
            SUCCEEDED: 0,
            FAILED: 0,
            CANCELLED: 0,
            "attempts": 0,
            "refused": 0,
        }

    # -- snapshot ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain data for pysyncobj's snapshot (no class references in the pickle)."""
        return copy.deepcopy(
            {
                k: getattr(self, k)
                for k in (
                    "seq",
                    "term",
                    "last_token",
                    "offset",
                    "leader",
                    "leader_since",
                    "decisions",
                    "order",
                    "inflight",
                    "versions",
                    "counters",
                )
            }
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecisionLog:
        log = cls()
        for key, value in copy.deepcopy(data).items():
            if hasattr(log, key):
                setattr(log, key, value)
        return log

    # -- queries -------------------------------------------------------------------------------

    def get(self, decision_id: str) -> Decision | None:
        return self.decisions.get(decision_id)

    def open_decisions(self) -> list[Decision]:
        """Decisions not yet ended, oldest first."""
        return [self.decisions[i] for i in self.order if self.decisions[i]["status"] not in TERMINAL]

    def recent(self, n: int = 10) -> list[Decision]:
        return [self.decisions[i] for i in self.order[-n:]][::-1]

    def newest_decision_token(self) -> tuple[int, int]:
        """The newest token of any decision or attempt the log holds ((0, 0) for a log that lost
        everything); leader entries' tokens do not count: they decide nothing."""
        tokens = [(0, 0)]
        for d in self.decisions.values():
            for token in (d.get("token"), d.get("attempt_token")):
                if token:
                    tokens.append((int(token["term"]), int(token["seq"])))
        return max(tokens)

    def last_for(self, app: str) -> Decision | None:
        """The newest decision about an application, if any is still kept."""
        for decision_id in reversed(self.order):
            if self.decisions[decision_id]["app"] == app:
                return self.decisions[decision_id]
        return None

    # -- commands ------------------------------------------------------------------------------

    def apply(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Apply one committed command; the result says whether it took effect and why not."""
        if not isinstance(cmd, dict):
            raise CommandError("command must be a dict")
        op = cmd.get("op")
        handler = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        if handler is None:
            raise CommandError(
                "field 'op' must be one of leader, decide, decide_many, start, finish, many, defer, "
                f"retarget, cancel, observe, observe_many; got {op!r}"
            )
        term = _need(cmd, "term", int)
        if term < self.term:
            self.counters["refused"] += 1
            return {"ok": False, "why": f"stale term {term} < {self.term}"}
        self.term = term
        return handler(cmd, term)

    def _token(self, term: int) -> dict[str, int]:
        self.seq += 1
        self.last_token = {"term": term + self.offset, "seq": self.seq}
        return dict(self.last_token)

    def _op_leader(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """A new leader's first entry; its token is what the leader raises the KB's fence to
        before it acts, so every token of earlier leaders is refused from then on."""
        self.leader = _need(cmd, "node", str)
        self.leader_since = float(_need(cmd, "ts", (int, float)))
        floor = cmd.get("kb_floor") or 0  # newest token term the KB holds (all replicas lost their logs)
        if isinstance(floor, int) and term + self.offset <= floor:
            self.offset = floor - term + 1
        token = self._token(term)
        return {"ok": True, "term": term, "token_term": term + self.offset, "token": token}

    def _op_decide(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        _check(cmd, "decide")
        app, exclude, reason = cmd["app"], cmd["exclude"], cmd["reason"]
        if app in self.inflight:
            return {
                "ok": False,
                "why": f"migration {self.inflight[app]} of {app} is in flight",
                "id": self.inflight[app],
            }
        token = self._token(term)
        decision_id = f"d{token['term']}.{token['seq']}"
        self.decisions[decision_id] = {
            "id": decision_id,
            "app": app,
            "service": cmd.get("service"),
            "kind": cmd.get("kind", ""),
            "reason": reason,
            "exclude": sorted(str(c) for c in exclude),
            "key": cmd.get("key", ""),
            "pinned": sorted(str(c) for c in cmd.get("pinned") or []),
            "token": token,
            "node": cmd.get("node"),
            "decided_at": float(cmd.get("ts", 0.0)),
            "detected_at": cmd.get("detected_at"),
            "spec_version": cmd.get("spec_version"),
            "status": PENDING,
            "attempts": 0,
            "attempt_token": None,
            "attempt_term": 0,
            "owner": None,
            "not_before": 0.0,
            "result": None,
            "detail": "",
            "artifacts": None,
            "ended_at": None,
        }
        self.order.append(decision_id)
        self.inflight[app] = decision_id
        self.counters["decisions"] += 1
        self._trim()
        return {"ok": True, "id": decision_id, "token": token}

    def _op_decide_many(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """Every decision of one detection pass in one log entry: a failure that affects k
        applications costs one commit, not k (issue 21). Each item is a ``decide`` command
        without ``op`` and ``term``; all are checked before any takes effect."""
        commands = _items(cmd, "decisions", ("decide",), implied="decide")
        return {"ok": True, "results": [self._op_decide(c, term) for c in commands]}

    def _op_start(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        _check(cmd, "start")  # before anything changes: a refusal leaves no trace
        plan = cmd.get("plan")
        decision = self._open(cmd)
        if isinstance(decision, str):
            return {"ok": False, "why": decision}
        node = cmd["node"]
        if decision["status"] == RUNNING and decision["attempt_term"] >= term:
            return {
                "ok": False,
                "why": f"attempt {decision['attempts']} already running on {decision['owner']}",
            }
        limit = cmd.get("max_attempts")
        if isinstance(limit, int) and not isinstance(limit, bool) and decision["attempts"] >= limit:
            # a takeover of a running attempt (or a retry) never exceeds the limit: end it instead
            decision["detail"] = f"gave up: {decision['attempts']} attempts used of {limit}"
            self._end(decision, FAILED, cmd)
            return {"ok": False, "id": decision["id"], "status": FAILED, "why": decision["detail"]}
        decision["attempts"] += 1
        decision["attempt_token"] = self._token(term)
        decision["attempt_term"] = term  # the Raft term (tokens may be offset above it)
        decision["owner"] = node
        decision["status"] = RUNNING
        decision["started_at"] = float(cmd.get("ts", 0.0))
        if isinstance(cmd.get("policy"), dict):  # the user's stored policy this attempt runs with
            decision["policy"] = copy.deepcopy(cmd["policy"])
        # the placement this attempt applies ({service: [{cluster, replicas, nodes}]}), computed by
        # the leader on its snapshot; an attempt without one (no engine) lets the playbook place
        if plan is not None:
            decision["plan"] = copy.deepcopy(plan)
        else:
            decision.pop("plan", None)  # never an earlier attempt's plan: it was computed for then
        self.counters["attempts"] += 1
        return {
            "ok": True,
            "id": decision["id"],
            "attempt": decision["attempts"],
            "token": decision["attempt_token"],
        }

    def _op_finish(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        _check(cmd, "finish")
        decision = self._open(cmd)
        if isinstance(decision, str):
            return {"ok": False, "why": decision}
        attempt, result = cmd["attempt"], cmd["result"]
        if decision["status"] != RUNNING or attempt != decision["attempts"]:
            return {"ok": False, "why": f"attempt {attempt} of {decision['id']} is not the running one"}
        decision["result"] = result
        decision["detail"] = str(cmd.get("detail", ""))[:2000]
        decision["artifacts"] = cmd.get("artifacts")
        if result == SUCCEEDED:
            self._end(decision, SUCCEEDED, cmd)
            version = decision.get("spec_version")
            if version is not None:
                self.versions[decision["app"]] = version
        elif cmd.get("retry"):
            decision["status"] = RETRY
            decision["owner"] = None
            decision["not_before"] = float(cmd.get("not_before", 0.0))
        else:
            self._end(decision, FAILED, cmd)
        return {"ok": True, "id": decision["id"], "status": decision["status"]}

    def _op_many(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """Several ``start`` or ``finish`` commands in one log entry, applied in order, each
        with its own result: a batch of k migrations starts with one commit and reports its
        outcomes with one, not k of each (about 0.1 s apiece, issue 21). Every command is
        checked before any takes effect."""
        commands = _items(cmd, "commands", BATCHABLE)
        return {"ok": True, "results": [getattr(self, f"_op_{c['op']}")(c, term) for c in commands]}

    def _op_defer(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """No attempt now (e.g. no eligible cluster): stay open, explained, until not_before.
        Costs no attempt, so a long outage is a visible state with backoff, not a retry loop."""
        decision = self._open(cmd)
        if isinstance(decision, str):
            return {"ok": False, "why": decision}
        if decision["status"] == RUNNING:
            return {"ok": False, "why": f"attempt {decision['attempts']} of {decision['id']} is running"}
        decision["status"] = RETRY
        decision["owner"] = None
        decision["detail"] = str(_need(cmd, "detail", str))[:2000]
        decision["not_before"] = float(_need(cmd, "not_before", (int, float)))
        decision["deferrals"] = int(decision.get("deferrals", 0)) + 1
        return {"ok": True, "id": decision["id"], "status": RETRY, "deferrals": decision["deferrals"]}

    def _op_retarget(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """Before an attempt: the clusters to avoid as health is now, not as it was at decision time."""
        decision = self._open(cmd)
        if isinstance(decision, str):
            return {"ok": False, "why": decision}
        if decision["status"] == RUNNING and decision["attempt_term"] >= term:
            return {"ok": False, "why": f"attempt {decision['attempts']} of {decision['id']} is running"}
        decision["exclude"] = sorted(str(c) for c in _need(cmd, "exclude", list))
        return {"ok": True, "id": decision["id"], "exclude": decision["exclude"]}

    def _op_cancel(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        decision = self._open(cmd)
        if isinstance(decision, str):
            return {"ok": False, "why": decision}
        decision["detail"] = str(cmd.get("detail", ""))[:2000]
        self._end(decision, CANCELLED, cmd)
        return {"ok": True, "id": decision["id"], "status": CANCELLED}

    def _op_observe(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """Record an application's spec version as already placed (first sight, or deleted: None)."""
        app = _need(cmd, "app", str)
        version = cmd.get("version")
        if version is None:
            self.versions.pop(app, None)
        else:
            self.versions[app] = _need(cmd, "version", int)
        return {"ok": True}

    def _op_observe_many(self, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """``observe`` for many applications in one entry ([[app, version or None], ...]): a new
        leader's first sight of a thousand applications is one commit."""
        pairs = _need(cmd, "versions", list)
        for i, pair in enumerate(pairs):
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not (pair[1] is None or (isinstance(pair[1], int) and not isinstance(pair[1], bool)))
            ):
                raise CommandError(
                    f"observe_many: field 'versions[{i}]' must be [application, version or null]"
                )
        for app, version in pairs:
            self._op_observe({"app": app, "version": version}, term)
        return {"ok": True}

    # -- helpers -------------------------------------------------------------------------------

    def _open(self, cmd: dict[str, Any]) -> Decision | str:
        decision_id = _need(cmd, "id", str)
        decision = self.decisions.get(decision_id)
        if decision is None:
            return f"unknown decision {decision_id}"
        if decision["status"] in TERMINAL:
            return f"decision {decision_id} already {decision['status']}"
        return decision

    def _end(self, decision: Decision, status: str, cmd: dict[str, Any]) -> None:
        decision["status"] = status
        decision["owner"] = None
        decision["ended_at"] = float(cmd.get("ts", 0.0))
        self.counters[status] += 1
        if self.inflight.get(decision["app"]) == decision["id"]:
            del self.inflight[decision["app"]]

    def _trim(self) -> None:
        ended = [i for i in self.order if self.decisions[i]["status"] in TERMINAL]
        for decision_id in ended[: max(0, len(ended) - HISTORY)]:
            self.order.remove(decision_id)
            del self.decisions[decision_id]
