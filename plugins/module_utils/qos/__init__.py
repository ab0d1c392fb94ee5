# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The QoS specification: load, validate and normalise an application's placement goals.

Two input formats map to one internal model (:class:`Application`):

* ``qonnect.io/v1`` (documented in docs/qos-spec.md), with objective weights, hard constraints,
  services, their manifests, replicas, spread and dependencies;
* QONNECT's original ``swarmchestrate.tu-berlin.de/v1`` format (``metadata.qos`` weights and one
  manifest bundle per tier), accepted unchanged so existing specs keep working.

Validation collects every error with its path (``QosSpecError.errors``) so a user fixes a spec in
one pass; nothing here raises anything else for bad input.

This package's name is the one everything imports (``qos.load_application``, ``qos.Application``...);
each job lives in its own module:

* ``model``: Application, Service, QosSpecError and the format's vocabulary (tiers, criteria);
* ``load``: the entry points: read the YAML (spec_yaml), pick the reader by apiVersion;
* ``native``: the qonnect.io/v1 reader (services, constraints, dependencies);
* ``qonnect_format``: QONNECT's format, its tier bundles and address placeholders;
* ``manifests``: reading and checking the Kubernetes manifests of a service;
* ``checks``: the shared shape, name, label and number checks (SpecChecker, the readers' base);
* ``resources``: pod specs and their resource requests (finite_quantity, sum_requests);
* ``limits``: the documented limits.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import (
    label_key_problem,
    label_value_problem,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import (
    LIMITS,
    MAX_GRACE_SECONDS,
    MAX_OBJECT_DATA_BYTES,
    MAX_OBJECTS_PER_SERVICE,
    MAX_QUANTITY,
    MAX_REPLICAS,
    MAX_SERVICES,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.load import (
    load_application,
    load_application_file,
    read_spec,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import (
    API_VERSION,
    CRITERIA,
    KIND,
    TIERS,
    Application,
    QosSpecError,
    Service,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.native import SELECTOR_OPERATORS
from ansible_collections.qonnect.core.plugins.module_utils.qos.qonnect_format import (
    QONNECT_API_VERSION,
    QONNECT_BUNDLES,
    QONNECT_PLACEHOLDERS,
    substitute,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import RESOURCES, finite_quantity
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity

__all__ = [
    "API_VERSION",
    "CRITERIA",
    "KIND",
    "LIMITS",
    "MAX_GRACE_SECONDS",
    "MAX_OBJECTS_PER_SERVICE",
    "MAX_OBJECT_DATA_BYTES",
    "MAX_QUANTITY",
    "MAX_REPLICAS",
    "MAX_SERVICES",
    "QONNECT_API_VERSION",
    "QONNECT_BUNDLES",
    "QONNECT_PLACEHOLDERS",
    "RESOURCES",
    "SELECTOR_OPERATORS",
    "TIERS",
    "Application",
    "QosSpecError",
    "Service",
    "finite_quantity",
    "label_key_problem",
    "label_value_problem",
    "load_application",
    "load_application_file",
    "parse_quantity",
    "read_spec",
    "substitute",
]
