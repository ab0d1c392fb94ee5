"""Issue 25.3: what Ansible masks of the kubeconfig options (module_utils/redact.py): their
credentials, not the cluster names, ``v1`` or ``default`` that kubeconfig content also holds."""

from __future__ import annotations

import yaml
from ansible_collections.qonnect.core.plugins.module_utils.redact import kubeconfig_secrets, no_log_values

TOKEN = "planted-token-3f9a"
KEY = "cGxhbnRlZC1rZXk="


def kubeconfig(cluster: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": "https://10.0.0.1:6443", "proxy-url": "http://u:pw@p:3128"},
            }
        ],
        "users": [
            {"name": f"{cluster}-admin", "user": {"token": TOKEN, "client-key-data": KEY}},
            {
                "name": "oidc",
                "user": {"auth-provider": {"config": {"id-token": "idt-1", "refresh-token": "rt-1"}}},
            },
            {"name": "exec", "user": {"exec": {"command": "aws", "args": ["--secret", "exec-arg-1"]}}},
        ],
        "contexts": [
            {
                "name": cluster,
                "context": {"cluster": cluster, "user": f"{cluster}-admin", "namespace": "default"},
            }
        ],
        "current-context": cluster,
    }


SECRETS = {TOKEN, KEY, "idt-1", "rt-1", "exec-arg-1", "http://u:pw@p:3128"}


def test_mapping_content_masks_credentials_only():
    found = kubeconfig_secrets(kubeconfig("edge-1"))
    assert found >= SECRETS
    assert not {"edge-1", "v1", "Config", "default", "https://10.0.0.1:6443"} & found


def test_yaml_text_masks_the_text_and_its_credentials():
    text = yaml.safe_dump(kubeconfig("edge-1"))
    found = kubeconfig_secrets(text)
    assert text in found and found >= SECRETS and "edge-1" not in found


def test_a_path_is_not_a_secret():
    assert kubeconfig_secrets("/etc/qonnect/edge-1.yaml") == set()


def test_unreadable_text_stays_masked_whole():
    assert kubeconfig_secrets("not: [yaml\nat all") == {"not: [yaml\nat all"}


SPEC = {
    "kb_token": {"type": "str", "no_log": True},
    "k8s_kubeconfig": {"type": "raw", "no_log": True},
    "kubeconfigs": {"type": "dict", "no_log": True},
    "name": {"type": "str"},
}


def test_no_log_values_narrow_kubeconfig_options_and_keep_the_others():
    params = {
        "kb_token": "qkb_admin_x",
        "k8s_kubeconfig": kubeconfig("fog-1"),
        "kubeconfigs": {"edge-1": kubeconfig("edge-1"), "cloud-1": "/k/cloud-1.yaml"},
        "name": "bookinfo",
    }
    # what AnsibleModule collected: every string of every no_log option
    ansible = {"qkb_admin_x", "v1", "Config", "edge-1", "fog-1", "default", "/k/cloud-1.yaml", *SECRETS}
    masked = no_log_values(SPEC, params, ansible)
    assert "qkb_admin_x" in masked and masked >= SECRETS
    assert not {"v1", "Config", "edge-1", "fog-1", "default", "/k/cloud-1.yaml"} & masked


def test_a_string_of_another_no_log_option_stays_masked_even_if_a_kubeconfig_holds_it():
    params = {"kb_token": "edge-1", "kubeconfigs": {"edge-1": kubeconfig("edge-1")}}
    assert "edge-1" in no_log_values(SPEC, params, {"edge-1", TOKEN})
