"""A KB killed with SIGKILL under concurrent write load loses no write it acknowledged."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

AGENTS = 8
EVENT_WRITERS = 4


class Load:
    """Writer threads that remember exactly what the KB acknowledged."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.stop = threading.Event()
        self.acked_seq: dict[str, int] = {}
        self.acked_events: dict[int, str] = {}
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.reports, args=(f"c{i}",), daemon=True) for i in range(AGENTS)
        ]
        self.threads += [
            threading.Thread(target=self.events, daemon=True) for _writer in range(EVENT_WRITERS)
        ]

    def reports(self, cluster: str) -> None:
        client = KBClient(self.url, self.token, timeout=5)
        seq = 0
        while not self.stop.is_set():
            seq += 1
            body = {
                "seq": seq,
                "ts": time.time(),
                "nodes": [{"name": f"n-{seq}", "ready": True}],
                "latencies": {"kb": float(seq)},
            }
            try:
                client.report(cluster, body)
            except KBError:
                return  # the KB is gone: this write was not acknowledged
            with self.lock:
                self.acked_seq[cluster] = seq

    def events(self) -> None:
        client = KBClient(self.url, self.token, timeout=5)
        while not self.stop.is_set():
            message = uuid.uuid4().hex
            try:
                made = client.post_event({"type": "durability", "message": message})
            except KBError:
                return
            with self.lock:
                self.acked_events[made["id"]] = message

    def total(self) -> int:
        with self.lock:
            return sum(self.acked_seq.values()) + len(self.acked_events)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_under_load_loses_no_acknowledged_write(backend, db_url_factory, kb_process, make_token):
    db_url = db_url_factory(backend)
    token = make_token(db_url, "admin")
    kb = kb_process(db_url)
    admin = KBClient(kb.url, token)
    for i in range(AGENTS):
        admin.register_cluster({"name": f"c{i}", "tier": "edge"})

    load = Load(kb.url, token)
    for thread in load.threads:
        thread.start()
    deadline = time.monotonic() + 20
    while load.total() < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    kb.kill()  # mid-flight: writers still have requests queued and in transactions
    load.stop.set()
    for thread in load.threads:
        thread.join(timeout=10)
    assert load.total() >= 300, "the load never got going"

    restarted = kb_process(db_url)
    admin = KBClient(restarted.url, token)
    for cluster, seq in load.acked_seq.items():
        stored = admin.get_cluster(cluster)
        assert stored["status"]["seq"] >= seq, cluster
        nodes = admin.list_nodes(cluster)
        assert int(nodes[0]["name"].split("-")[1]) >= seq
    stored_events: dict[int, str] = {}
    after = 0
    while True:
        page = admin.list_events(after_id=after, limit=1000)
        if not page:
            break
        stored_events.update({e["id"]: e["message"] for e in page})
        after = page[-1]["id"]
    lost = {i: m for i, m in load.acked_events.items() if stored_events.get(i) != m}
    assert not lost, f"{len(lost)} acknowledged events were lost"


@pytest.mark.timeout(120)
def test_the_kb_recovers_when_postgresql_drops_its_connections(db_url_factory, kb_process, make_token):
    import psycopg

    db_url = db_url_factory("postgresql")
    token = make_token(db_url, "admin")
    kb = kb_process(db_url)
    admin = KBClient(kb.url, token)
    admin.register_cluster({"name": "c0", "tier": "edge"})
    dbname = db_url.rsplit("/", 1)[1]
    with psycopg.connect(db_url.rsplit("/", 1)[0] + "/test", autocommit=True) as pg:
        pg.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,))
    statuses = []
    for seq in range(1, 6):
        try:
            admin.report("c0", {"seq": seq, "ts": time.time()})
            statuses.append(200)
        except KBError as exc:
            statuses.append(exc.status)
        try:
            admin.get_cluster("c0")
        except KBError as exc:
            statuses.append(exc.status)
    assert set(statuses) <= {200, 503}, statuses  # a dropped connection is never a 500
    assert statuses[-2:] == [200, 200], statuses  # and the KB reconnects by itself
    assert admin.get_cluster("c0")["status"]["seq"] == 5
