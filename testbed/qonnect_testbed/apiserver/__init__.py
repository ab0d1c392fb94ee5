"""Emulated Kubernetes API server (aiohttp) over a testbed Store; see app.make_app."""

from qonnect_testbed.apiserver.app import make_app

__all__ = ["make_app"]
