# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a KB cluster record says about reaching the cluster, read one way by the deploy
module (k8s/auth.py) and the controller (k8s/render.py). Imports neither Ansible nor the
kubernetes client: every module reaches it through its options (args_common -> auth), and
only a module that talks to clusters may need kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def record_credentials(record: Mapping[str, Any]) -> tuple[str | dict, str | None]:
    """The credentials a KB cluster record names: its kubeconfig (a path or content, as stored)
    and context. The last resort of k8s/auth.py's ``resolve`` and all the controller has (no
    user gives it any): one reading, so both reach a cluster alike. Here, in neither auth.py nor client.py, so the
    controller imports no Ansible and a module that only reads the KB no kubernetes client. No
    kubeconfig: an empty path (fails when used)."""
    return record.get("kubeconfig") or "", record.get("context")
