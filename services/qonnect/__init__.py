"""qonnect: the services behind the qonnect.core Ansible collection.

The QoS spec, the placement engine, the KB client and the Kubernetes apply logic live in the
collection's ``plugins/module_utils``; this package imports them by their collection name
(``ansible_collections.qonnect.core.plugins.module_utils``), so that each concept has a single
home. The wheel carries the collection at ``site-packages/ansible_collections/qonnect/core``
(``services/setup.py``).
"""

__version__ = "0.1.0"
