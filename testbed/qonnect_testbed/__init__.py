"""Testbed: emulated Kubernetes clusters (like KWOK) for tests and the demo.

No container runtime runs on the development machines, so this package provides clusters that
behave like Kubernetes from the outside: one process (``server``) hosts many clusters, each an
API server (``apiserver``) over its ``store`` on its own loopback address with TLS (``pki``) and a
bearer token (``kubeconfig``), driven by simulated controllers (``sim``) and delayed by a latency
matrix (``latency``). ``fleet`` reads the profiles that describe a fleet, ``federation`` writes the
file that describes a running one, and ``cli`` is ``qonnect testbed``. Product code never imports
this package; see docs/testbed.md.
"""
