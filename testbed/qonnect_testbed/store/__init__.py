"""The emulated API server's object store, one job per module:

- `objects.py`: the Store itself (objects, resourceVersions, watch history, cascading deletes);
- `resources.py`: the served resource types (RESOURCES, ResourceType);
- `selectors.py`: labelSelector/fieldSelector parsing and matching;
- `defaults.py`: what the API server fills in (defaults, pod admission);
- `validation.py`: what it refuses (422 Invalid);
- `errors.py`: ApiError, the metav1 Status of a failed request;
- `values.py`: deep copies and timestamps.

The names other code uses are re-exported here.
"""

from qonnect_testbed.store.errors import ApiError
from qonnect_testbed.store.objects import Callback, Event, Store
from qonnect_testbed.store.resources import INITIAL_NAMESPACES, RESOURCES, ResourceType, resource_type
from qonnect_testbed.store.values import json_copy, now_rfc3339

__all__ = [
    "INITIAL_NAMESPACES",
    "RESOURCES",
    "ApiError",
    "Callback",
    "Event",
    "ResourceType",
    "Store",
    "json_copy",
    "now_rfc3339",
    "resource_type",
]
