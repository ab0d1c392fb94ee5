"""The KB client keeps its connections alive, shares them between threads, and reconnects."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import MAX_IDLE, KBClient, KBError

pytestmark = pytest.mark.timeout(120)


def local_ports(client: KBClient) -> list[int]:
    """Local ports of the client's idle kept-alive connections."""
    return sorted(conn.sock.getsockname()[1] for conn in client._idle)


def test_calls_reuse_one_connection(tmp_path, kb_process, make_token):
    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    kb = kb_process(db_url)
    client = KBClient(kb.url, make_token(db_url, "admin"))
    client.register_cluster({"name": "c1", "tier": "edge"})
    (port,) = local_ports(client)
    for seq in range(1, 6):
        client.report("c1", {"seq": seq, "ts": 1.0})
    assert client.get_cluster("c1")["status"]["seq"] == 5
    assert local_ports(client) == [port]
    with pytest.raises(KBError) as err:  # an error answer leaves the connection usable too
        client.get_cluster("nope")
    assert err.value.status == 404 and local_ports(client) == [port]
    client.close()
    assert local_ports(client) == [] and client.list_clusters()[0]["name"] == "c1"


def test_threads_share_a_client(tmp_path, kb_process, make_token):
    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    kb = kb_process(db_url)
    client = KBClient(kb.url, make_token(db_url, "admin"))
    with ThreadPoolExecutor(8) as pool:
        names = list(
            pool.map(lambda i: client.register_cluster({"name": f"t{i}", "tier": "fog"})["name"], range(24))
        )
    assert sorted(names) == sorted(f"t{i}" for i in range(24))
    assert len(client.list_clusters()) == 24
    assert 1 <= len(client._idle) <= MAX_IDLE


def test_a_restarted_kb_is_reached_on_a_new_connection(tmp_path, kb_process, make_token):
    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    kb = kb_process(db_url)
    client = KBClient(kb.url, make_token(db_url, "admin"), timeout=5)
    client.register_cluster({"name": "c1", "tier": "cloud"})
    (old,) = local_ports(client)
    port = kb.url.rsplit(":", 1)[1]
    kb.kill()
    with pytest.raises(KBError) as err:
        client.list_clusters()
    assert err.value.status == 0 and "refused" in err.value.message.lower()
    again = kb_process(db_url, "--port", port)  # the last --port wins: the same address
    assert again.url == kb.url
    assert [c["name"] for c in client.list_clusters()] == ["c1"]
    assert local_ports(client) != [old]


def test_a_verified_tls_connection_is_kept_too(tmp_path, kb_process, make_token):
    from qonnect_testbed.pki import CertificateAuthority, write_server_pair

    ca = CertificateAuthority.create("kb-test-ca")
    ca_path = ca.save(tmp_path / "pki")
    cert, key = write_server_pair(tmp_path / "pki", "kb", *ca.issue_server("kb", ["127.0.0.1"]))
    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    kb = kb_process(db_url, "--tls-cert", str(cert), "--tls-key", str(key))
    client = KBClient(kb.url, make_token(db_url, "admin"), ca_path=str(ca_path))
    assert client.list_clusters() == []
    (port,) = local_ports(client)
    for _attempt in range(3):
        assert client.list_clusters() == []
    assert local_ports(client) == [port]  # no new TLS handshake per call
