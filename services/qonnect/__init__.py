"""qonnect: the services behind the qonnect.core Ansible collection.

The QoS spec, the placement engine, the KB client and the Kubernetes apply logic live in the
collection's ``plugins/module_utils``; this package imports them from there (see
``qonnect._collection``) so that each concept has a single home.
"""

__version__ = "0.1.0"
