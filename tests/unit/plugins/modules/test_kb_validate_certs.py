"""Issue 24.5: TLS verification of the KB is on unless a user explicitly turns it off.

- The AWX credential type: AWX injects a boolean input a credential does not hold as False, so a
  credential created through the API or awx.awx.credential without the field must still verify.
- The modules read QONNECT_KB_VALIDATE_CERTS with module_utils/booleans.py: "" or an unknown
  word fails in one line naming the variable (as the inventory plugin does).
- Every shipped playbook that talks to the KB takes the same KB options, remove.yml included.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import jinja2.sandbox
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.qonnect.core.plugins.module_utils.booleans import parse_bool
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.module import kb_client_from_params
from ansible_collections.qonnect.core.plugins.modules import cluster_info

ROOT = Path(__file__).resolve().parents[4]
CREDENTIAL_TYPE = ROOT / "docs" / "awx" / "credential-type-qonnect-kb.yml"
KB_OPTIONS = ("kb_url", "kb_token", "kb_ca_path", "kb_validate_certs")


def awx_inject(credential_type: dict, inputs: dict) -> dict[str, str]:
    """The env injectors rendered as AWX renders them: a boolean field the credential does not
    hold is False in the template's namespace, whatever the field's ``default`` says."""
    namespace = dict(inputs)
    for field in credential_type["inputs"]["fields"]:
        if field.get("type") == "boolean" and field["id"] not in namespace:
            namespace[field["id"]] = False
    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    tower = {"filename": {"kb_ca": "/runner/env/kb_ca"}}
    return {
        k: env.from_string(v).render(tower=tower, **namespace)
        for k, v in credential_type["injectors"]["env"].items()
    }


def verifies(env: dict[str, str]) -> bool:
    return parse_bool(env["QONNECT_KB_VALIDATE_CERTS"], "QONNECT_KB_VALIDATE_CERTS")


def test_awx_credential_without_the_boolean_field_verifies_tls():
    credential_type = yaml.safe_load(CREDENTIAL_TYPE.read_text())
    env = awx_inject(credential_type, {"kb_url": "https://kb.example.org:8443", "kb_token": "t"})
    assert verifies(env) is True


def test_awx_credential_turns_verification_off_only_when_asked():
    credential_type = yaml.safe_load(CREDENTIAL_TYPE.read_text())
    booleans = [f["id"] for f in credential_type["inputs"]["fields"] if f.get("type") == "boolean"]
    assert booleans, "the KB credential type has a field to turn verification off"
    inputs = {"kb_url": "https://kb.example.org:8443", "kb_token": "t"}
    # every boolean field, set to each value: only one that says "insecure" turns verification off
    for field in booleans:
        for value in (False, True):
            env = awx_inject(credential_type, inputs | {field: value})
            assert verifies(env) is not (value and "insecure" in field), (field, value)
    assert verifies(awx_inject(credential_type, inputs | {b: True for b in booleans})) is False


def test_every_boolean_field_defaults_to_what_awx_injects_when_it_is_missing():
    """A ``default: true`` boolean would be shown as on in the UI but injected as False."""
    credential_type = yaml.safe_load(CREDENTIAL_TYPE.read_text())
    for field in credential_type["inputs"]["fields"]:
        if field.get("type") == "boolean":
            assert field.get("default", False) is False, field["id"]


def run(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        cluster_info.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("value", ["", "maybe", "ture"])
def test_module_refuses_a_bad_environment_value_naming_it(monkeypatch, capsys, value):
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", value)
    out = run({"kb_url": "https://127.0.0.1:1", "kb_token": "qkb_unit_test_token"}, capsys)
    assert out["failed"]
    assert out["msg"].startswith("QONNECT_KB_VALIDATE_CERTS: expected a boolean"), out["msg"]
    assert "Traceback" not in json.dumps(out)


def client_verifies(params: dict) -> bool:
    client = kb_client_from_params({"kb_url": "https://kb.example.org:8443", **params})
    return client._ssl.verify_mode == ssl.CERT_REQUIRED


def test_module_verifies_unless_told_not_to(monkeypatch):
    monkeypatch.delenv("QONNECT_KB_VALIDATE_CERTS", raising=False)
    assert client_verifies({}) is True
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", "false")
    assert client_verifies({}) is False
    assert client_verifies({"kb_validate_certs": True}) is True  # the option wins over the variable
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", "yes")
    assert client_verifies({}) is True
    assert client_verifies({"kb_validate_certs": False}) is False
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", "")
    with pytest.raises(InputError, match=r"^QONNECT_KB_VALIDATE_CERTS: "):
        client_verifies({})


@pytest.mark.parametrize("playbook", ["deploy", "migrate", "register_clusters", "remove"])
def test_playbooks_take_the_same_kb_options(playbook):
    plays = yaml.safe_load((ROOT / "playbooks" / f"{playbook}.yml").read_text())
    defaults = plays[0]["module_defaults"]["group/qonnect.core.kb"]
    assert sorted(defaults) == sorted(KB_OPTIONS), playbook
    assert defaults["kb_validate_certs"] == "{{ kb_validate_certs | default(omit) }}"
