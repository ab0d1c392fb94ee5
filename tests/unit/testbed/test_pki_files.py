from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from qonnect_testbed import federation, fleet, kubeconfig, pki


def test_server_certificate_chains_to_ca_and_names_the_ip(tmp_path):
    ca = pki.CertificateAuthority.create()
    ca_file = ca.save(tmp_path)
    cert_pem, key_pem = ca.issue_server("edge-1", ["127.0.0.9"])
    cert_path, key_path = pki.write_server_pair(tmp_path, "edge-1", cert_pem, key_pem)
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.9"]
    cert.verify_directly_issued_by(ca.cert)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    # the standard library accepts the pair and the CA
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    ssl.create_default_context(cafile=str(ca_file))


def test_kubeconfig_is_private_and_loadable_by_the_client(tmp_path):
    from kubernetes import client, config

    ca = pki.CertificateAuthority.create()
    path = kubeconfig.write(
        tmp_path / "k" / "c.yaml", kubeconfig.build("c", "https://127.0.0.5:6443", "sekrit", ca.cert_pem)
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    assert cfg.host == "https://127.0.0.5:6443"
    assert cfg.api_key["BearerToken"] == "Bearer sekrit"
    assert Path(cfg.ssl_ca_cert).read_bytes() == ca.cert_pem


def test_cluster_addresses_skip_network_and_broadcast():
    assert federation.cluster_address(0) == "127.0.0.2"
    assert federation.cluster_address(99) == "127.0.0.101"
    assert federation.cluster_address(253) == "127.0.1.1"
    addresses = {federation.cluster_address(i) for i in range(600)}
    assert len(addresses) == 600
    assert not any(a.endswith((".0", ".255")) for a in addresses)


def test_federation_document_round_trip(tmp_path):
    spec = fleet.expand(fleet.load("paper"), clusters=3)
    endpoints = {c.name: (federation.cluster_address(i), 40000 + i) for i, c in enumerate(spec.clusters)}
    configs = {c.name: tmp_path / f"{c.name}.yaml" for c in spec.clusters}
    doc = federation.document(spec, endpoints, configs, tmp_path / "ca.crt")
    for name in ("f.yaml", "f.json"):
        path = federation.write(tmp_path / name, doc)
        back = federation.read(path)
        assert back == doc
    edge = back["clusters"][2]
    assert edge["name"] == "edge-1" and edge["server"] == "https://127.0.0.4:40002"
    assert edge["nodes"][0]["profile"] == "energy"
    assert back["latency_ms"]["cloud-1"]["edge-1"] == 43.0  # the paper's measured round trip
    assert "token" not in yaml.safe_dump(doc)


def test_federation_read_errors_name_the_field(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({"kind": "Federation", "clusters": [{"name": "x"}], "latency_ms": {}}))
    with pytest.raises(federation.FederationError, match=r"clusters\[0\]\.tier: missing"):
        federation.read(path)
    with pytest.raises(federation.FederationError, match="cannot read"):
        federation.read(tmp_path / "none.yaml")
