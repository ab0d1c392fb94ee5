"""Bearer tokens: generated once, stored only as a SHA-256 hash, bound to a role.

Tokens carry 256 random bits, so a plain SHA-256 (no salt, no slow KDF) is enough to make a
stolen database useless for logging in, and lets a request be checked with one indexed lookup.
All tokens are kept in memory (reloaded every few seconds), so heartbeats skip the database.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from qonnect.kb.storage import Conn

PREFIX = "qkb_"
RELOAD_SECONDS = 5.0
ROLES = ("admin", "controller", "agent", "reader")
ID_LENGTH = 16


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name, role and (for agents) its cluster."""

    name: str
    role: str
    cluster: str | None = None

    @property
    def sees_credentials(self) -> bool:
        return self.role in ("admin", "controller")

    @property
    def sees_secrets(self) -> bool:
        """Reads Secret manifests in specs whole (the controller deploys them; kb/redact.py)."""
        return self.role in ("admin", "controller")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def insert_token(conn: Conn, role: str, cluster: str | None, name: str | None, now: float) -> dict:
    """Create a token; the clear text is returned here and never stored."""
    if role not in ROLES:
        raise ValueError(f"role: {role!r} is not one of {', '.join(ROLES)}")
    if (role == "agent") != bool(cluster):
        raise ValueError("cluster: is required for role agent and only allowed for it")
    token = new_token()
    label = name or f"{role}-{secrets.token_hex(3)}"
    conn.execute(
        "INSERT INTO tokens (hash, name, role, cluster, created) VALUES (?, ?, ?, ?, ?)",
        (hash_token(token), label, role, cluster, now),
    )
    _changed(conn)
    digest = hash_token(token)
    return {
        "token": token,
        "id": token_id(digest),
        "name": label,
        "role": role,
        "cluster": cluster,
        "created": now,
    }


def token_id(digest: str) -> str:
    """A token's public id: the start of its hash (names need not be unique; ids are)."""
    return digest[:ID_LENGTH]


def list_tokens(conn: Conn) -> list[dict]:
    rows = conn.all("SELECT hash, name, role, cluster, created FROM tokens ORDER BY created")
    return [
        {"id": token_id(r[0]), "name": r[1], "role": r[2], "cluster": r[3], "created": r[4]} for r in rows
    ]


def revoke_token(conn: Conn, name: str) -> int:
    """Delete every token with this name (the CLI's ``--name``); see ``revoke_token_id``."""
    count = conn.execute("DELETE FROM tokens WHERE name = ?", (name,)).rowcount
    if count:
        _changed(conn)
    return count


def revoke_token_id(conn: Conn, ident: str) -> int:
    """Delete the one token with this id; returns how many were deleted (0 or 1)."""
    if len(ident) != ID_LENGTH or any(c not in "0123456789abcdef" for c in ident):
        return 0
    count = conn.execute(f"DELETE FROM tokens WHERE substr(hash, 1, {ID_LENGTH}) = ?", (ident,)).rowcount
    if count:
        _changed(conn)
    return count


def _changed(conn: Conn) -> None:
    """Count a change of the token table (same transaction), so every KB instance reloads it."""
    conn.execute("UPDATE token_changes SET generation = generation + 1 WHERE id = 1")


class TokenCache:
    """All tokens' hashes -> principals, checked against the database every RELOAD_SECONDS.

    Heartbeats then never wait for the database to authenticate. A token created since the
    last reload is found by a direct lookup on a miss; a revoked one stops working at the next
    reload. Every token write counts up ``token_changes.generation``; a check that finds it
    unchanged reads nothing else (reading and indexing 10,000 agents' tokens every 5 s held the
    GIL for tens of milliseconds: the KB's worst report latencies).
    """

    def __init__(self) -> None:
        self._entries: dict[str, Principal] = {}
        self._generation: int | None = None

    def get(self, digest: str) -> Principal | None:
        return self._entries.get(digest)

    def put(self, digest: str, principal: Principal) -> None:
        self._entries[digest] = principal

    def drop(self, ident: str) -> None:
        """Forget a revoked token at once (other KB instances: at their next reload)."""
        self._entries = {d: p for d, p in self._entries.items() if not d.startswith(ident)}

    def reload(self, conn: Conn) -> bool:
        """Read all tokens if they changed since the last reload (``conn`` is one snapshot);
        True if it read them."""
        row = conn.one("SELECT generation FROM token_changes WHERE id = 1")
        generation = row[0] if row else None
        if generation is not None and generation == self._generation:
            return False
        rows = conn.all("SELECT hash, name, role, cluster FROM tokens")
        self._entries = {r[0]: Principal(r[1], r[2], r[3]) for r in rows}
        self._generation = generation
        return True


def lookup(conn: Conn, digest: str) -> Principal | None:
    row = conn.one("SELECT name, role, cluster FROM tokens WHERE hash = ?", (digest,))
    return Principal(row[0], row[1], row[2]) if row else None
