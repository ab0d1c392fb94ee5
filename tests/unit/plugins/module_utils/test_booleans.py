"""Issue 24.5: one strict boolean parser (module_utils/booleans.py) for the modules and the
inventory plugin, so QONNECT_KB_VALIDATE_CERTS="" is an error naming it everywhere, never a
silent "do not verify"."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.booleans import option_or_env, parse_bool
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError


@pytest.mark.parametrize("word", ["true", "True", "YES", "on", "1", " y ", "t", True, 1])
def test_true_words(word):
    assert parse_bool(word, "X") is True


@pytest.mark.parametrize("word", ["false", "False", "NO", "off", "0", "n", "f", False, 0])
def test_false_words(word):
    assert parse_bool(word, "X") is False


@pytest.mark.parametrize("word", ["", "  ", "maybe", "ture", "2", 2, None, [], "truee"])
def test_anything_else_is_an_error_naming_the_variable(word):
    with pytest.raises(InputError, match=r"^QONNECT_KB_VALIDATE_CERTS: expected a boolean") as err:
        parse_bool(word, "QONNECT_KB_VALIDATE_CERTS")
    assert err.value.path == "QONNECT_KB_VALIDATE_CERTS"


def test_empty_value_is_said_so():
    with pytest.raises(InputError, match="got an empty value"):
        parse_bool("", "QONNECT_KB_VALIDATE_CERTS")


def test_option_wins_then_environment_then_default():
    env = {"QONNECT_KB_VALIDATE_CERTS": "false"}
    assert option_or_env(True, "kb_validate_certs", "QONNECT_KB_VALIDATE_CERTS", True, env) is True
    assert option_or_env(None, "kb_validate_certs", "QONNECT_KB_VALIDATE_CERTS", True, env) is False
    assert option_or_env(None, "kb_validate_certs", "QONNECT_KB_VALIDATE_CERTS", True, {}) is True


def test_set_but_empty_is_not_unset():
    env = {"QONNECT_KB_VALIDATE_CERTS": ""}
    with pytest.raises(InputError, match=r"^QONNECT_KB_VALIDATE_CERTS: "):
        option_or_env(None, "kb_validate_certs", "QONNECT_KB_VALIDATE_CERTS", True, env)


def test_a_bad_option_value_names_the_option():
    with pytest.raises(InputError, match=r"^validate_certs: "):
        option_or_env("sure", "validate_certs", "QONNECT_KB_VALIDATE_CERTS", True, {})
