"""Three real controller replicas: election, failover, rejoin, catch-up, quorum loss, secret."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
from _controller_stack import Stack, qonnect_cmd, wait_for
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from cryptography.fernet import Fernet

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _same_state(stack: Stack, replicas) -> bool:
    sts = [r.status() for r in replicas]
    if not all(sts):
        return False
    keys = [(s["term"], s["token"], s["log_counters"], s["commit_index"]) for s in sts]
    return all(k == keys[0] for k in keys) and sts[0]["last_applied"] == sts[0]["commit_index"]


def test_sigkill_leader_new_leader_within_3s_three_times(raft3: Stack):
    for _round in range(3):
        leader = raft3.wait_leader()
        term = leader.status()["term"]
        others = [r for r in raft3.replicas if r is not leader and r.alive()]
        leader.kill()
        t0 = time.monotonic()
        new = raft3.wait_leader(timeout=10, among=others)
        elapsed = time.monotonic() - t0
        assert new is not leader and new.status()["term"] > term
        assert elapsed < 3.0, f"re-election took {elapsed:.2f}s"
        leader.start()  # comes back as a follower and rejoins
        wait_for(lambda: _same_state(raft3, raft3.replicas), 45, what="all three replicas in sync")


def test_restarted_replica_rejoins_from_its_journal(raft3: Stack):
    follower = next(r for r in raft3.replicas if not r.status()["is_leader"])
    follower.kill()
    assert (follower.data_dir / "raft.journal").exists()
    leader = raft3.wait_leader()
    leader.kill()  # forces a new term and new committed entries while the follower is down
    rest = [r for r in raft3.replicas if r.alive()]
    leader.start()
    wait_for(lambda: _same_state(raft3, rest), 45, what="the two live replicas to agree")
    before = rest[0].status()
    follower.start()
    wait_for(lambda: _same_state(raft3, raft3.replicas), 45, what="the restarted follower to catch up")
    after = follower.status()
    assert after["term"] >= before["term"] and after["token"] == rest[0].status()["token"]
    # caught up through one peer, its link to the other may still be connecting (seen in CI)
    wait_for(
        lambda: all(follower.status()["peers"].values()), 15, what="the rejoined replica to reach both peers"
    )


def test_replica_that_lost_its_data_catches_up(raft3: Stack):
    victim = raft3.replicas[0]
    victim.kill()
    shutil.rmtree(victim.data_dir)
    leader = raft3.wait_leader()
    if leader is victim:  # pragma: no cover - victim is dead, cannot be leader
        raise AssertionError("dead replica reported as leader")
    victim.start()
    wait_for(lambda: _same_state(raft3, raft3.replicas), 45, what="the wiped replica to catch up")
    st = victim.status()
    assert st["log_counters"] == leader.status()["log_counters"] and st["commit_index"] > 1
    assert (victim.data_dir / "raft.journal").exists()


def test_two_of_three_lost_no_decisions_and_status_says_why(raft3: Stack):
    survivor = raft3.replicas[2]
    for r in raft3.replicas[:2]:
        r.kill()
    # A follower still names its dead leader until its election timeout; then it has none.
    st = wait_for(
        lambda: (
            (s := survivor.status())
            and not s["is_leader"]
            and "no quorum" in s["why"]
            and s["leader"] is None
            and s
        ),
        15,
        what="the survivor to report lost quorum and no leader",
    )
    assert not st["has_quorum"]
    assert "reaches 1 of 3 replicas" in st["why"] and "majority of 2" in st["why"]
    commit = st["commit_index"]
    time.sleep(3)
    assert survivor.status()["commit_index"] == commit, "nothing is committed without a majority"
    out = subprocess.run(
        qonnect_cmd("controller", "status", "--url", ",".join(r.http for r in raft3.replicas)),
        capture_output=True,
        text=True,
        timeout=30,
        env=raft3.env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "UNREACHABLE" in out.stdout and "no quorum" in out.stdout and "quorum: NO" in out.stdout


class _Marker:
    """Unpickling this runs a shell command creating a file: what an attacker would send."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _frame(data: bytes) -> bytes:
    return struct.pack("i", len(data)) + data


def test_outsider_bytes_on_the_raft_port_are_never_unpickled(raft3: Stack, tmp_path: Path):
    marker = tmp_path / "pwned"
    payload = zlib.compress(pickle.dumps(_Marker(marker), 2))
    # control: this payload does run code when unpickled
    control = tmp_path / "control"
    pickle.loads(zlib.decompress(zlib.compress(pickle.dumps(_Marker(control), 2))))
    assert control.exists()
    attacks = [
        _frame(payload),  # what pysyncobj without a password would unpickle
        _frame(Fernet(Fernet.generate_key()).encrypt(payload)),  # well-formed, wrong key
        _frame(os.urandom(200)),
        _frame(b"") + _frame(payload) * 3,
    ]
    for replica in raft3.replicas:
        host, port = replica.raft.rsplit(":", 1)
        for attack in attacks:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(attack)
                sock.settimeout(2)
                try:
                    sock.recv(100)
                except (TimeoutError, ConnectionError):
                    pass
    time.sleep(1.0)
    assert not marker.exists(), "an outsider's pickle was deserialised"
    assert all(r.alive() for r in raft3.replicas)
    leader = raft3.wait_leader()
    assert all(leader.status()["peers"].values())
    leader.kill()  # the group still fails over normally
    raft3.wait_leader(timeout=5, among=[r for r in raft3.replicas if r is not leader])


@pytest.mark.parametrize(
    "secret, expected",
    [
        (None, "--raft-secret-file is required"),
        ("short", "at least 32 bytes"),
        ("a" * 16, "at least 32 bytes"),
        ("a" * 48, "not random"),
        ("0123456789abcdef0123456789abcdef", "permissions"),
    ],
)
def test_refuses_to_start_without_a_proper_secret(stack: Stack, tmp_path: Path, secret, expected):
    token = tmp_path / "token"
    token.write_text("t")
    args = [
        "controller",
        "run",
        "--id",
        "x",
        "--self",
        "127.0.0.1:1",
        "--peers",
        "127.0.0.1:1",
        "--kb",
        "http://127.0.0.1:9",
        "--token-file",
        str(token),
        "--data-dir",
        str(tmp_path / "d"),
    ]
    if secret is not None:
        path = tmp_path / "secret"
        path.write_text(secret)
        path.chmod(0o644 if expected == "permissions" else 0o600)
        args += ["--raft-secret-file", str(path)]
    else:
        args += ["--raft-secret-file", ""]
    out = subprocess.run(
        qonnect_cmd(*args), capture_output=True, text=True, timeout=60, env=stack.env, check=False
    )
    assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "d").exists()


def test_healthz_and_metrics_report_the_leader(raft3: Stack):
    import urllib.request

    def consistent(replica) -> bool:
        """/metrics and /status of one replica agree (read twice: an election may happen between)."""
        with urllib.request.urlopen(replica.http + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        st = replica.status()
        return bool(st) and (
            f"qonnect_controller_is_leader {int(st['is_leader'])}\n" in text
            and f"qonnect_controller_term {st['term']}\n" in text
            and f"qonnect_controller_drift_judgements_total {st['drift_judgements']}\n" in text
        )

    raft3.wait_leader()
    for replica in raft3.replicas:
        wait_for(lambda r=replica: consistent(r), 10, 0.2, f"{replica.name} metrics to match its status")
        with urllib.request.urlopen(replica.http + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert (
            "qonnect_controller_migrations_total" in text
            and "qonnect_controller_detection_seconds_count" in text
        )
        with urllib.request.urlopen(replica.http + "/healthz", timeout=5) as resp:
            health = resp.read().decode()
        assert '"ok": true' in health and '"leader": "' in health


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_oversized_frames_before_authentication_are_cut_off(raft3: Stack):
    """Issue 11: one connection claiming a 2 GiB frame and sending 32 MB cost 6.9 s of CPU and
    forced an election. Now the connection is closed after at most 64 KiB, the leader stays."""
    leader = raft3.wait_leader()
    term = leader.status()["term"]
    cpu = _cpu_seconds(leader.proc.pid)
    host, port = leader.raft.rsplit(":", 1)
    sent = 0
    t0 = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        chunk = os.urandom(1 << 20)
        try:
            sock.sendall(struct.pack("i", 2**31 - 1))
            while sent < 32 << 20:
                sock.sendall(chunk)
                sent += len(chunk)
        except (ConnectionError, TimeoutError, OSError):
            pass
    assert sent < 32 << 20, "the replica kept reading an unauthenticated 2 GiB frame"
    time.sleep(2)
    used = _cpu_seconds(leader.proc.pid) - cpu
    st = leader.status()
    assert st["is_leader"] and st["term"] == term, "the attack forced a leader change"
    assert used < 2.0, f"the leader spent {used:.1f}s of CPU on {sent} unauthenticated bytes"
    assert time.monotonic() - t0 < 10
    with socket.create_connection((host, int(port)), timeout=5) as sock:  # a negative length too
        sock.sendall(struct.pack("i", -5) + b"x" * 100)
        sock.settimeout(3)
        assert sock.recv(10) == b"", "a negative frame length did not close the connection"


def test_new_leader_raises_the_kb_fence_before_it_acts(raft3: Stack):
    """Issue 11: a new leader used to only read the KB's newest token, so a deposed leader's token
    stayed valid until the new one wrote a placement. Now each leader raises the fence first."""
    leader = raft3.wait_leader()

    def fenced() -> dict | None:
        fence, token = raft3.admin.request("GET", "/api/v1/fence"), (leader.status() or {}).get("token")
        return token if token and (fence["term"], fence["seq"]) == (token["term"], token["seq"]) else None

    token = wait_for(fenced, 10, 0.1, "the leader's token to be the KB fence")
    fence = dict(token)
    leader.kill()
    survivors = [r for r in raft3.replicas if r is not leader]
    raft3.wait_leader(timeout=10, among=survivors)
    raised = wait_for(
        lambda: (
            (f := raft3.admin.request("GET", "/api/v1/fence"))
            and (f["term"], f["seq"]) > (fence["term"], fence["seq"])
            and f
        ),
        10,
        0.1,
        "the new leader to raise the fence",
    )
    with pytest.raises(KBError) as err:  # the old leader's token is refused before any placement exists
        KBClient(raft3.kb_url, raft3.controller_token.read_text()).post_event(
            {
                "type": "controller.migration.succeeded",
                "application": "x",
                "fencing": token,
                "ref": {"id": "d1.1", "term": token["term"], "seq": token["seq"], "attempt": 1},
            }
        )
    assert err.value.status == 409 and raised["term"] > token["term"]
    leader.start()


def test_status_clients_that_give_up_leave_no_tracebacks(raft3: Stack):
    replica = raft3.replicas[0]
    host, port = replica.http.split("//", 1)[1].rsplit(":", 1)
    for _attempt in range(30):
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # reset: the client timed out and went away
    time.sleep(1)
    assert replica.status() is not None
    log = replica.log()
    assert "Traceback" not in log and "BrokenPipe" not in log and "ConnectionReset" not in log, log[-2000:]
