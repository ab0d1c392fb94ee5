"""Kubernetes access for qonnect.core: clients, apply, waiting, pruning, deploy, node facts."""
