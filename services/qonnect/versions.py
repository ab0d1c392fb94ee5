"""Refuse a dependency outside the version range a module was tested with.

The KB's HTTP protocol (kb/protocol.py) overrides uvicorn internals and the controller's Raft
transport (controller/raft_transport.py, raft_durability.py) overrides pysyncobj's private methods: another version must fail
at start with the range to install, not later with a broken answer. One check for both.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

Range = tuple[tuple[int, int, int], tuple[int, int, int]]  # [lowest, first untested)


def require_tested(
    package: str,
    tested: Range,
    error: type[Exception],
    user: str,
    pip_name: str | None = None,
    installed: str | None = None,
) -> None:
    """Raise ``error`` unless ``package`` (or the given ``installed`` version) is in ``tested``."""
    if installed is None:
        try:
            installed = version(package)
        except PackageNotFoundError:
            raise error(f"{user} needs the Python package {package}") from None
    parts = tuple(int(p) for p in installed.split(".")[:3] if p.isdigit())
    low, high = tested
    wanted = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    if not low <= parts < high:
        raise error(
            f"{package} {installed} is installed, but {user} is tested only with {package} {wanted} "
            f"(it relies on {package} internals); install that range: pip install '{pip_name or package}{wanted}'"
        )
