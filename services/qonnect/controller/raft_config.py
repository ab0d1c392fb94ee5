"""Checks of a replica's Raft configuration, before any pysyncobj object exists: the shared secret
(``--raft-secret-file``), the replica's and its peers' addresses, and the pysyncobj version.

pysyncobj's wire format is pickle; with a password it is Fernet-encrypted and authenticated
(HMAC checked before anything is unpickled), so a shared secret is mandatory: a node refuses to
start without one, or with one shorter than 32 bytes or visibly not random.

raft.py, raft_durability.py and raft_transport.py use pysyncobj through private names (its
transport, TCP server and connection, message handler and state, journal's meta storer, the code
of ``SyncObj.__init__`` and of its serializer), so each of them refuses a pysyncobj outside the
tested version range (``TESTED_PYSYNCOBJ``) when it is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

from qonnect.errors import UserError
from qonnect.versions import require_tested

MIN_SECRET_BYTES = 32
MIN_SECRET_DISTINCT = 12  # 32 bytes from a CSPRNG (hex, base64) have far more distinct characters
TESTED_PYSYNCOBJ = ((0, 3, 17), (0, 3, 18))  # [lowest, first untested): keep in step with pyproject


class RaftConfigError(UserError, ValueError):
    """Bad replica configuration (missing secret, bad address): a user error, not a crash."""


def check_pysyncobj_version(installed: str | None = None) -> None:
    """Refuse a pysyncobj outside the tested range: the controller overrides its private methods."""
    require_tested("pysyncobj", TESTED_PYSYNCOBJ, RaftConfigError, "the controller", installed=installed)


def read_secret(path: str | os.PathLike[str] | None) -> str:
    """Read the shared Raft secret; refuse a missing, empty, short or world-readable file."""
    if not path:
        raise RaftConfigError(
            "--raft-secret-file is required: without a shared secret pysyncobj "
            "accepts unauthenticated pickle from anyone who can reach the port"
        )
    file = Path(path)
    try:
        mode = file.stat().st_mode
        secret = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RaftConfigError(f"--raft-secret-file {path}: cannot read ({exc.strerror})") from None
    if mode & 0o077:
        raise RaftConfigError(
            f"--raft-secret-file {path}: permissions {oct(mode & 0o777)} let other "
            "users read the secret; expected 0600 or stricter"
        )
    if len(secret.encode()) < MIN_SECRET_BYTES:
        raise RaftConfigError(
            f"--raft-secret-file {path}: secret must be at least {MIN_SECRET_BYTES} bytes "
            "(generate one: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    if len(set(secret)) < MIN_SECRET_DISTINCT:
        raise RaftConfigError(
            f"--raft-secret-file {path}: secret is not random (only {len(set(secret))} "
            "distinct characters); generate one: python -c 'import secrets; "
            "print(secrets.token_hex(32))'"
        )
    return secret


def check_address(value: str, field: str) -> str:
    """A HOST:PORT string with a numeric port in range."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RaftConfigError(f"{field}: expected HOST:PORT with a port in 1..65535, got {value!r}")
    return value
