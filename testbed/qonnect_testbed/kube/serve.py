"""``qonnect testbed serve --engine kube``: the foreground process of the real engine."""

from __future__ import annotations

import argparse
import asyncio
import logging

from qonnect_testbed import fleet as fleet_mod
from qonnect_testbed.errors import TestbedError
from qonnect_testbed.fleet import Fleet
from qonnect_testbed.kube.binaries import BinariesError, ensure_binaries
from qonnect_testbed.kube.control_plane import ControlPlaneError, Timing


def timing_from(args: argparse.Namespace) -> Timing:
    """The CLI's node timing flags over the real components' defaults."""
    timing = Timing()
    for name in (
        "node_monitor_grace_period",
        "default_unreachable_toleration_seconds",
        "default_not_ready_toleration_seconds",
    ):
        value = getattr(args, name, None)
        if value is not None:
            setattr(timing, name, type(getattr(timing, name))(value))
    return timing


def serve_kube(args: argparse.Namespace, spec: Fleet) -> int:
    from qonnect_testbed.kube.host import serve
    from qonnect_testbed.kube.policy import ProfilePolicy

    try:
        bin_dir = ensure_binaries()
    except BinariesError as exc:
        raise TestbedError(str(exc)) from None
    policy = ProfilePolicy(fleet_mod.load(args.profile), args.start_delay)
    logging.getLogger("qonnect_testbed").setLevel(logging.INFO)
    try:
        asyncio.run(serve(spec, args.dir.resolve(), bin_dir=bin_dir, policy=policy, timing=timing_from(args)))
    except ControlPlaneError as exc:
        raise TestbedError(str(exc)) from None
    return 0
