# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One strict parser for boolean settings such as QONNECT_KB_VALIDATE_CERTS.

The modules and the inventory plugin read the same environment variables; a lenient parser in
one of them (Ansible's config turns ``""`` into false) would silently switch TLS verification
off where the other refuses. So both use this one: an empty or unknown value is an error that
names the variable, never a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError

TRUE = frozenset({"true", "yes", "on", "1", "y", "t"})
FALSE = frozenset({"false", "no", "off", "0", "n", "f"})


def parse_bool(value: Any, name: str) -> bool:
    """``value`` as a bool: a bool, 0/1, or one of TRUE / FALSE in any case. Anything else
    (also ``""`` and None) raises InputError naming ``name``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
    shown = "an empty value" if value == "" else repr(value)
    raise InputError(name, f"expected a boolean (true/false, yes/no, on/off, 1/0), got {shown}")


def option_or_env(
    value: Any, option: str, env: str, default: bool, environ: Mapping[str, str] | None = None
) -> bool:
    """An option's boolean: ``value`` when given (not None), else the environment variable
    ``env`` when it is set (set but empty is an error, not "unset"), else ``default``."""
    if value is not None:
        return parse_bool(value, option)
    environ = os.environ if environ is None else environ
    if env in environ:
        return parse_bool(environ[env], env)
    return default
