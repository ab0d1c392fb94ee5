"""k8s/auth.py: which credentials reach each cluster (issue 14.5 and the reader-token error)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.k8s import auth
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, get_client

RECORDS = {
    "cloud-1": {
        "name": "cloud-1",
        "server": "https://10.0.0.1:6443",
        "kubeconfig": "/etc/k/cloud-1.yaml",
        "context": None,
    },
    "edge-1": {
        "name": "edge-1",
        "server": "https://10.0.0.2:6443",
        "kubeconfig": "/etc/k/edge-1.yaml",
        "context": "edge",
    },
}
READER = {n: {k: v for k, v in r.items() if k not in ("kubeconfig", "context")} for n, r in RECORDS.items()}


def kubeconfig(*contexts: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": "https://x"}} for c in contexts],
        "users": [{"name": c, "user": {"token": "t0ken-" + c}} for c in contexts],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in contexts],
    }


def test_kb_paths_by_default():
    out = auth.resolve({"cloud-1", "edge-1"}, RECORDS, {}, {})
    assert out == {"cloud-1": ("/etc/k/cloud-1.yaml", None), "edge-1": ("/etc/k/edge-1.yaml", "edge")}


def test_precedence_overrides_then_host_then_shared_kubeconfig_then_kb():
    shared = kubeconfig("cloud-1", "edge")
    params = {
        "k8s_kubeconfig": yaml.safe_dump(shared),
        "k8s_host": "https://10.0.0.1:6443/",
        "k8s_api_key": "s3cret",
        "k8s_ca_cert": "/ca.pem",
    }
    out = auth.resolve({"cloud-1", "edge-1"}, RECORDS, {}, params)
    cloud, context = out["cloud-1"]
    assert context == "cloud-1" and cloud["users"][0]["user"] == {"token": "s3cret"}
    assert cloud["clusters"][0]["cluster"] == {
        "server": "https://10.0.0.1:6443/",
        "certificate-authority": "/ca.pem",
    }
    assert out["edge-1"] == (shared, "edge")  # the record's context names it in the shared kubeconfig
    out = auth.resolve({"cloud-1"}, RECORDS, {"cloud-1": "/mine.yaml"}, params)
    assert out["cloud-1"] == ("/mine.yaml", None)


def test_host_applies_to_the_named_cluster_and_validate_certs_false():
    params = {
        "k8s_host": "https://lb.example.org",
        "k8s_api_key": "k",
        "k8s_cluster": "edge-1",
        "k8s_validate_certs": False,
    }
    cfg, context = auth.resolve({"edge-1"}, RECORDS, {}, params)["edge-1"]
    assert context == "edge-1" and cfg["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True


def test_host_matching_no_cluster_is_an_error():
    with pytest.raises(ValueError, match="k8s_host https://elsewhere: no cluster in the KB has that server"):
        auth.resolve({"cloud-1"}, RECORDS, {}, {"k8s_host": "https://elsewhere", "k8s_api_key": "k"})


def test_reader_token_error_says_why_for_every_cluster_at_once():
    with pytest.raises(ValueError) as err:
        auth.resolve({"cloud-1", "edge-1"}, READER, {}, {})
    text = str(err.value)
    assert "cluster cloud-1: the KB token may not read kubeconfig paths" in text
    assert (
        "cluster edge-1: the KB token may not read kubeconfig paths" in text and "context named edge" in text
    )
    assert "no kubeconfig (register it" not in text


def test_registered_without_kubeconfig_is_a_different_error():
    records = {"cloud-1": dict(RECORDS["cloud-1"], kubeconfig=None)}
    with pytest.raises(ValueError, match="cluster cloud-1: no kubeconfig \\(register it"):
        auth.resolve({"cloud-1"}, records, {}, {})


def test_content_that_is_not_a_kubeconfig_is_a_clear_error():
    with pytest.raises(
        ValueError, match=r"kubeconfigs\.cloud-1: not a kubeconfig path and not kubeconfig YAML"
    ):
        auth.resolve({"cloud-1"}, RECORDS, {"cloud-1": "just: [\ntext"}, {})


def test_client_error_on_content_never_shows_the_token():
    broken = kubeconfig("a")
    broken["contexts"] = []  # no context to use
    with pytest.raises(K8sError) as err:
        get_client("a", broken, "a")
    assert "t0ken" not in str(err.value) and "<kubeconfig content>" in str(err.value)


def test_argspec_reads_the_k8s_auth_environment_variables():
    spec = auth.k8s_auth_argspec()
    env = {name: opts["fallback"][1][0] for name, opts in spec.items()}
    assert env == {
        "k8s_kubeconfig": "K8S_AUTH_KUBECONFIG",
        "k8s_host": "K8S_AUTH_HOST",
        "k8s_api_key": "K8S_AUTH_API_KEY",
        "k8s_ca_cert": "K8S_AUTH_SSL_CA_CERT",
        "k8s_validate_certs": "K8S_AUTH_VERIFY_SSL",
        "k8s_cluster": "QONNECT_K8S_CLUSTER",
    }
    assert spec["k8s_api_key"]["no_log"] and spec["k8s_kubeconfig"]["no_log"]


@pytest.mark.parametrize("content", ["- just\n- a list\n", "plain text\n", "42\n"])
def test_a_shared_kubeconfig_file_that_is_not_a_mapping_is_a_clear_error(tmp_path, content):
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"k8s_kubeconfig: {path} is not a kubeconfig \(expected a mapping"):
        auth.resolve({"cloud-1"}, RECORDS, {}, {"k8s_kubeconfig": str(path)})
