"""Per-process KB state and the request dependencies that authenticate and authorise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from qonnect.kb import auth
from qonnect.kb.middleware import PRINCIPAL
from qonnect.kb.storage import Database
from qonnect.kb.writer import GroupWriter


@dataclass
class Settings:
    """What `qonnect kb serve` configures."""

    db_url: str
    heartbeat_timeout: float = 15.0
    max_body: int = 1_048_576
    access_log: bool = False
    request_timeout: float = 30.0
    max_connections: int = 4096


@dataclass
class KBState:
    settings: Settings
    db: Database
    writer: GroupWriter
    tokens: auth.TokenCache = field(default_factory=auth.TokenCache)
    digest_key: bytes = b""  # the key of the Secret digests readers see (kb/redact.py)

    def lookup(self, digest: str) -> auth.Principal | None:
        with self.db.reader() as conn:
            return auth.lookup(conn, digest)

    def reload_tokens(self) -> None:
        with self.db.reader() as conn:
            self.tokens.reload(conn)


_bearer = HTTPBearer(auto_error=False, description="a token from `qonnect kb token create`")


async def state(request: Request) -> KBState:
    return request.app.state.kb


async def principal(
    request: Request, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> auth.Principal:
    """The caller behind the bearer token; 401 without a valid one."""
    checked = request.scope.get(PRINCIPAL)  # by the AuthFirst middleware
    if checked is not None:
        return checked
    if cred is None or not cred.credentials:
        raise HTTPException(
            401, "Authorization: a bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    kb: KBState = request.app.state.kb
    digest = auth.hash_token(cred.credentials)
    who = kb.tokens.get(digest)
    if who is None:
        who = await run_in_threadpool(kb.lookup, digest)
        if who is None:
            raise HTTPException(
                401, "Authorization: the bearer token is not valid", headers={"WWW-Authenticate": "Bearer"}
            )
        kb.tokens.put(digest, who)
    return who


def require(who: auth.Principal, *roles: str, action: str) -> None:
    """403 unless the caller has one of ``roles``."""
    if who.role not in roles:
        raise HTTPException(403, f"role {who.role!r} may not {action} (needs {' or '.join(roles)})")


def require_cluster(who: auth.Principal, cluster: str, action: str) -> None:
    """Admins may write any cluster, an agent only its own."""
    if who.role == "admin":
        return
    if who.role == "agent" and who.cluster == cluster:
        return
    if who.role == "agent":
        raise HTTPException(
            403,
            f"this agent token is bound to cluster {who.cluster!r} and may not {action} cluster {cluster!r}",
        )
    raise HTTPException(403, f"role {who.role!r} may not {action} a cluster")
