# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The documented limits of a QoS spec (docs/qos-spec.md), checked before the work they protect."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils import spec_yaml

MAX_SERVICES = 100
MAX_OBJECTS_PER_SERVICE = 250
MAX_REPLICAS = 1000
MAX_OBJECT_DATA_BYTES = 2**20  # a ConfigMap's or Secret's data, as Kubernetes limits it
MAX_QUANTITY = 2.0**63  # beyond what a Kubernetes quantity can hold
MAX_GRACE_SECONDS = 7 * 86400  # spec.failureGraceSeconds: a week at most
LIMITS = {
    **spec_yaml.LIMITS,
    "services": MAX_SERVICES,
    "objects_per_service": MAX_OBJECTS_PER_SERVICE,
    "replicas": MAX_REPLICAS,
    "configmap_bytes": MAX_OBJECT_DATA_BYTES,
}
