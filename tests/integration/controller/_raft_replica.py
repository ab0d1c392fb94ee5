"""One real RaftNode in its own process, proposing continuously while it leads (test helper).

    python _raft_replica.py SELF PEERS_COMMA DATA_DIR SECRET_FILE CONTROL_DIR

Every 50 ms it writes CONTROL_DIR/<port>.json: its view (leader, term, commit and applied
index) a digest of its state machine (DecisionLog.to_dict()) and the longest it went without running. While CONTROL_DIR/propose
exists and it leads, it commits commands back to back (a `leader` entry issuing a fencing
token, then `observe` entries), as a controller under migration load does. Once
CONTROL_DIR/migrate exists, the leader starts the migration runs it describes in this process
(the controller's Executor, as the controller loop does). Logging (pysyncobj's
included) goes to stderr.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any


def main() -> int:
    self_addr, peers, data_dir, secret_file, control = sys.argv[1:6]
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    from qonnect.controller.raft import ProposalError, RaftNode
    from qonnect.controller.raft_config import read_secret

    node = RaftNode(self_addr, peers.split(","), read_secret(secret_file), data_dir)
    ctl = Path(control)
    me = self_addr.rsplit(":", 1)[1]
    proposed = {"n": 0, "ok": 0}

    def propose() -> None:
        i = random.randrange(1000)
        while True:
            if not (ctl / "propose").exists() or not node.is_leader():
                time.sleep(0.02)
                continue
            i += 1
            cmd = (
                {"op": "leader", "node": node.node_id}
                if i % 10 == 0
                else {"op": "observe", "app": f"a{i % 7}", "version": i}
            )
            proposed["n"] += 1
            try:
                if node.propose(cmd, timeout=2.0).get("ok"):
                    proposed["ok"] += 1
            except ProposalError:
                time.sleep(0.05)

    slow = slow_answers(node)

    for _i in range(4):  # several commands in flight, as a loop with migrations running has
        threading.Thread(target=propose, daemon=True).start()
    migrations: dict[str, Any] = {}  # run index -> outcome, once CONTROL_DIR/migrate asks for runs

    last = time.monotonic()
    max_gap = 0.0  # longest pause of this loop (it sleeps 50 ms): how long the process starved
    while True:
        now = time.monotonic()
        max_gap, last = max(max_gap, now - last), now
        order = ctl / "migrate"
        if not migrations and node.is_leader() and order.exists():
            migrations["started"] = time.time()
            migrate(me, json.loads(order.read_text()), migrations)
        try:
            slow["delay"] = float((ctl / f"slow-{me}").read_text())
        except (OSError, ValueError):
            slow["delay"] = 0.0
        try:  # the tick thread applies entries meanwhile: keep a reading taken at one index
            applied = node.raftLastApplied
            machine = json.dumps(node.machine.to_dict(), sort_keys=True, default=str)
            if node.raftLastApplied != applied:
                continue
        except RuntimeError:  # changed while copied
            continue
        view = {
            "pid": os.getpid(),
            "leader": node.leader(),
            "is_leader": node.is_leader(),
            "term": node.term(),
            "commit": node.raftCommitIndex,
            "applied": applied,
            "digest": hashlib.sha256(machine.encode()).hexdigest(),
            "seq": node.machine.seq,
            "proposed": proposed["n"],
            "committed": proposed["ok"],
            "max_gap": round(max_gap, 3),
            "migrations": dict(migrations),
        }
        tmp = ctl / f".{me}.json"
        tmp.write_text(json.dumps(view))
        tmp.replace(ctl / f"{me}.json")
        time.sleep(0.05)


def slow_answers(node: Any) -> dict[str, float]:
    """A slow way back (set ``["delay"]`` in seconds): this replica's answers to the leader's
    appends leave late, in order, as from a host too busy to answer in time."""
    slow = {"delay": 0.0}
    pending: collections.deque[tuple[float, Any, Any]] = collections.deque()
    transport = node._SyncObj__transport
    send = transport.send

    def delayed_send(peer: Any, message: Any) -> Any:
        if (
            isinstance(message, dict)
            and message.get("type") == "next_node_idx"
            and (slow["delay"] or pending)
        ):
            due = time.monotonic() + slow["delay"]
            pending.append((max(due, pending[-1][0]) if pending else due, peer, message))
            return True
        return send(peer, message)

    def flush() -> None:  # on pysyncobj's own thread, like every send
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _due, peer, message = pending.popleft()
            send(peer, message)

    transport.send = delayed_send
    node.addOnTickCallback(flush)
    return slow


def migrate(me: str, order: dict[str, Any], outcomes: dict[str, Any]) -> None:
    """Migration runs in this process, each in a thread, as the controller loop starts them."""
    from qonnect.controller import proctree
    from qonnect.controller.executor import Executor

    proctree.set_migration_nice(int(order.get("nice", proctree.DEFAULT_MIGRATION_NICE)))

    def one(index: int) -> None:
        executor = Executor(
            order["playbook"],
            str(Path(order["runs"]) / f"{me}-{index}"),
            "http://127.0.0.1:9",
            order["token"],
            timeout=120,
            extra=dict(order["extra"], out=str(Path(order["runs"]) / f"nice-{me}-{index}")),
            owner=proctree.new_owner(f"replica-{me}-{index}"),
        )
        decision: dict[str, Any] = {"id": f"d{index}", "app": f"app{index}", "reason": "load", "exclude": []}
        decision["service"] = None
        outcomes[str(index)] = executor.run(decision, 1, {"term": 1, "seq": index + 1}, lambda: True).result

    for index in range(order["count"]):
        threading.Thread(target=one, args=(index,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
