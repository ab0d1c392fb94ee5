"""Issue 24.5: the inventory plugin reads validate_certs / QONNECT_KB_VALIDATE_CERTS with the
modules' parser (module_utils/booleans.py): unset verifies, "" or an unknown word is an error
naming where it came from, never a silent "do not verify" (Ansible's own bool turns "" into false).
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleParserError
from ansible_collections.qonnect.core.plugins.inventory import kb as kb_plugin

BASE = "plugin: qonnect.core.kb\nurl: https://kb.example.org:8443\ntoken: qkb_reader_unit\n"


@pytest.fixture
def built(monkeypatch):
    """The validate_certs each KBClient the plugin builds gets (no network: it answers empty)."""
    seen: list[bool] = []

    class Client:
        def __init__(self, url, token, ca_path=None, validate_certs=True, timeout=10.0):
            seen.append(validate_certs)

        def inventory(self):
            return {"clusters": [], "latency_ms": {}, "placements": {}}

        def list_clusters(self):
            return []

    monkeypatch.setattr(kb_plugin, "KBClient", Client)
    monkeypatch.delenv("QONNECT_KB_VALIDATE_CERTS", raising=False)
    return seen


def test_unset_verifies(parse, built):
    parse(BASE)
    assert built == [True]


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("no", False), ("1", True), ("On", True)])
def test_environment_words(parse, built, monkeypatch, value, expected):
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", value)
    parse(BASE)
    assert built == [expected]


@pytest.mark.parametrize("value", ["", "maybe"])
def test_bad_environment_value_is_an_error_naming_the_variable(parse, built, monkeypatch, value):
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", value)
    with pytest.raises(AnsibleParserError, match="QONNECT_KB_VALIDATE_CERTS: expected a boolean"):
        parse(BASE)
    assert built == []  # no client, no request with verification guessed


def test_option_in_the_file(parse, built, monkeypatch):
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", "true")
    parse(BASE + "validate_certs: false\n")
    assert built == [False]
    with pytest.raises(AnsibleParserError, match="validate_certs: expected a boolean"):
        parse(BASE + "validate_certs: sometimes\n")
