# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options every qonnect.core module shares to reach the Knowledge Base."""

from __future__ import annotations


class ModuleDocFragment:
    """The KB connection options, so each module documents them the same way."""

    DOCUMENTATION = r"""
options:
  kb_url:
    description:
      - Base URL of the qonnect Knowledge Base, for example V(http://127.0.0.1:8080).
      - If not set, the value of the E(QONNECT_KB_URL) environment variable is used.
    type: str
  kb_token:
    description:
      - Bearer token for the Knowledge Base.
      - If not set, the value of the E(QONNECT_KB_TOKEN) environment variable is used.
      - Never logged or returned.
    type: str
  kb_ca_path:
    description:
      - Path of a PEM CA bundle used to verify the Knowledge Base's TLS certificate.
      - If not set, the value of the E(QONNECT_KB_CA_PATH) environment variable is used.
    type: path
  kb_validate_certs:
    description:
      - Whether to verify the Knowledge Base's TLS certificate.
      - If not set, the value of the E(QONNECT_KB_VALIDATE_CERTS) environment variable is used, else V(true).
        The variable takes V(true)/V(false), V(yes)/V(no), V(on)/V(off) or V(1)/V(0); set but empty, or any
        other value, is an error naming it (as in the inventory plugin P(qonnect.core.kb#inventory)), never
        a silent V(false).
    type: bool
  kb_timeout:
    description:
      - Timeout in seconds of each request to the Knowledge Base.
    type: float
    default: 10.0
notes:
  - The KB connection options can be set once for all qonnect.core modules with
    C(module_defaults) and the action group C(group/qonnect.core.kb).
"""
