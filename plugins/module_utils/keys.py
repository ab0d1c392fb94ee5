# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every ``qonnect.io/*`` label and annotation key, in one place that the modules, the Resource
Agent, the controller and the testbed import (docs/architecture.md lists what each means)."""

from __future__ import annotations

PREFIX = "qonnect.io/"

# on the objects qonnect.core applies
MANAGED_BY = "app.kubernetes.io/managed-by"  # value: qonnect
APP_LABEL = PREFIX + "application"
SERVICE_LABEL = PREFIX + "service"
ROLE_LABEL = PREFIX + "role"  # "address": an ExternalName stub pointing at the serving cluster
HASH_ANNOTATION = PREFIX + "applied-hash"
GRACE_ANNOTATION = PREFIX + "failure-grace-seconds"
# the controller's fencing token (term, seq) and the write time, on every object a migration
# writes: a deposed leader's write is visible in the cluster's own record
FENCING_ANNOTATION = PREFIX + "fencing-token"
# the owning application's identity, "<namespace>/<application>" (k8s/ownership.py)
OWNER_ANNOTATION = PREFIX + "owner"
# on a Namespace qonnect created: the application it was created for (only it may delete it)
NAMESPACE_CREATED_ANNOTATION = PREFIX + "namespace-created-for"
# on an Application: "false" = the controller reports drift of its objects but restores nothing
SELF_HEAL_LABEL = PREFIX + "self-heal"

# on Node objects: where a node is and what it costs (read by the Resource Agent)
TIER_LABEL = PREFIX + "tier"
LOCATION_LABEL = PREFIX + "location"
ENERGY_LABEL = PREFIX + "energy-kwh"
PRICE_LABEL = PREFIX + "price-eur-h"
BANDWIDTH_LABEL = PREFIX + "bandwidth-gbps"
PROFILE_LABEL = PREFIX + "node-profile"  # the testbed's node profile (energy, cost, performance)

# on KB cluster records
DOMAIN_LABEL = PREFIX + "service-domain"  # DNS domain other clusters reach its services under
ADDRESS_LABEL = PREFIX + "address"  # address substituted for QONNECT's [*_CLUSTER_IP] placeholders
# seconds this cluster stays suspect before the controller judges it down (over --cluster-grace)
CLUSTER_GRACE_LABEL = PREFIX + "cluster-grace-seconds"
