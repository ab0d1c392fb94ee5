#!/usr/bin/python
# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Store, update or remove an application's QoS spec in the Knowledge Base."""

from __future__ import annotations

DOCUMENTATION = r"""
module: application
short_description: Store, update or remove an application's QoS spec in the qonnect Knowledge Base
version_added: 0.1.0
description:
  - Validates a QoS spec (format C(qonnect.io/v1) or QONNECT's original C(swarmchestrate.tu-berlin.de/v1))
    and reports every error at once, with the path of each field.
  - Manifests given by file are read and stored inline, so the Knowledge Base holds the whole application.
  - Storing an unchanged spec changes nothing; each change makes a new version in the Knowledge Base.
  - With O(rollback_to), stores an older version's spec again as the newest version (a rollback).
requirements:
  - python >= 3.10
  - PyYAML >= 6.0 (specs read from O(src))
  - jmespath >= 1.0 (specs with a C(filter) constraint)
  - The Python packages go into the Python that runs the module; with the inventory plugin
    P(qonnect.core.kb#inventory) or C(localhost) that is the Python running Ansible on the controller node
    (C(pip install) into it, C(pipx inject ansible-core PACKAGE) for a pipx install, or the execution
    environment; see the README).
author:
  - qonnect.core developers (@qonnect)
options:
  name:
    description:
      - Name of the application. Required with O(state=absent) and with O(rollback_to).
      - With O(state=present) it must match the spec's C(metadata.name) if given.
    type: str
  spec:
    description:
      - The QoS spec as a mapping. Mutually exclusive with O(src).
      - Manifest files it names (C(file) entries) should be absolute paths; relative ones are resolved
        against the module's working directory.
    type: dict
  src:
    description:
      - Path of a QoS spec file (YAML). Manifest files it names are resolved relative to its folder.
      - Mutually exclusive with O(spec).
    type: path
  bundles:
    description:
      - QONNECT's tier manifest bundles given as files beside its Application file (as QONNECT's
        API takes them), mapping C(cloud_svc), C(fog_svc) and C(edge_svc) to a manifest file.
      - Only with QONNECT's format. Relative paths are resolved against the working directory.
    type: dict
  check_placement:
    description:
      - Store the spec only if it can be placed on the Knowledge Base's current inventory, so an
        unplaceable spec never becomes the current version.
    type: bool
    default: true
  rollback_to:
    description:
      - Store the spec of this older stored version again as the application's newest version (a
        rollback; the new version names the version it replaced and the one it restores). The
        controller then places it like any new version.
      - Needs O(name); mutually exclusive with O(spec) and O(src). Changes nothing when the current
        version already holds that version's spec.
      - Uses the Knowledge Base's C(/rollback) operation, as C(qonnect rollback NAME --to VERSION) does.
    type: int
  state:
    description: Whether the application should be stored or removed.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - qonnect.core.kb
attributes:
  check_mode:
    support: full
    description: Validates and reports whether the stored spec would change, writing nothing.
  diff_mode:
    support: full
    description: Shows the normalised application before and after.
  platform:
    support: full
    platforms: posix
    description: Runs on any host that reaches the Knowledge Base and can read O(src).
"""

EXAMPLES = r"""
- name: Store Bookinfo with energy-first goals (the example spec shipped in the collection)
  qonnect.core.application:
    src: ~/.ansible/collections/ansible_collections/qonnect/core/examples/bookinfo/energy-first.yml

- name: Store a spec kept beside the playbook
  qonnect.core.application:
    src: "{{ playbook_dir }}/specs/shop.yml"

- name: Roll bookinfo back to the spec of its version 2 (stored again as the newest version)
  qonnect.core.application:
    name: bookinfo
    rollback_to: 2

- name: Remove it
  qonnect.core.application:
    name: bookinfo
    state: absent
"""

RETURN = r"""
application:
  description: Summary of the stored application.
  returned: when state is present
  type: dict
  sample: {"name": "bookinfo", "namespace": "bookinfo", "services": ["productpage", "ratings"],
           "objective": {"energy": 1.0, "cost": 0.0, "performance": 0.0, "latency": 0.0}}
version:
  description: Version of the spec in the Knowledge Base after the change (none in check mode if new).
  returned: when state is present
  type: raw
  sample: 3
rollback:
  description: With O(rollback_to), the rollback stored (or, in check mode, the one that would be).
  returned: when a rollback changed the application
  type: dict
  sample: {"failing": 4, "restores": 2, "by": "admin",
           "reason": "rolled back by the application module from version 4 to version 2"}
errors:
  description: Every problem found in the spec, each as its path, a colon and what is wrong.
  returned: failure
  type: list
  elements: str
  sample: ["spec.services[2].tier: 'cloude' is not one of cloud, fog, edge, any"]
"""

from ansible_collections.qonnect.core.plugins.module_utils.args_common import (
    SOURCE_ARGSPEC,
    STATE_ARGSPEC,
    argspec,
)
from ansible_collections.qonnect.core.plugins.module_utils.module import run_module
from ansible_collections.qonnect.core.plugins.module_utils.runners.application import run


def main() -> None:
    run_module(
        run,
        argspec(
            SOURCE_ARGSPEC,
            STATE_ARGSPEC,
            check_placement={"type": "bool", "default": True},
            rollback_to={"type": "int"},
        ),
        mutually_exclusive=[("spec", "src", "rollback_to")],
        required_if=[("state", "present", ("spec", "src", "rollback_to"), True)],
        required_by={"rollback_to": ("name",)},
    )


if __name__ == "__main__":
    main()
