"""``qonnect kb``: serve the Knowledge Base, manage its tokens, migrate its database."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import time

from qonnect.kb.models import NAME_PATTERN

DEFAULT_DB = "sqlite:///var/lib/qonnect/kb.sqlite"


def _db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=os.environ.get("QONNECT_KB_DB", DEFAULT_DB),
        help="sqlite:///ABSOLUTE/PATH, sqlite://RELATIVE/PATH or postgresql://USER@HOST/DB "
        "(default: $QONNECT_KB_DB or %(default)s)",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    kb = subparsers.add_parser("kb", help="the Knowledge Base service")
    sub = kb.add_subparsers(dest="kb_command", metavar="ACTION")
    sub.required = True

    serve = sub.add_parser("serve", help="run the KB HTTP API")
    _db_arg(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    serve.add_argument("--port-file", help="write the bound port to this file once listening")
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert")
    serve.add_argument(
        "--max-body",
        type=int,
        default=1_048_576,
        help="largest request body in bytes (413 above; default %(default)s)",
    )
    serve.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=15.0,
        help="seconds after the last report a cluster counts as unhealthy",
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="log one line per request to stderr (method, path, status, "
        "duration, the token's name; never the token)",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a client has to send a whole request (headers and body), "
        "also for the first request of a connection (default %(default)s)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=4096,
        help="open connections above this get 503 and are closed (default %(default)s)",
    )
    serve.add_argument(
        "--insecure-listen",
        action="store_true",
        help="allow plain HTTP on an address other than loopback (e.g. behind a "
        "TLS-terminating proxy); tokens would otherwise cross the network "
        "in clear text",
    )
    serve.set_defaults(func=_serve)

    token = sub.add_parser("token", help="manage API tokens")
    tsub = token.add_subparsers(dest="token_command", metavar="ACTION")
    tsub.required = True
    create = tsub.add_parser("create", help="create a token and print it (shown only once)")
    _db_arg(create)
    create.add_argument("--role", required=True, choices=("admin", "controller", "agent", "reader"))
    create.add_argument("--cluster", help="the cluster an agent token may write (agents only)")
    create.add_argument("--name", help="a label to recognise the token by")
    create.set_defaults(func=_token_create)
    lst = tsub.add_parser("list", help="list tokens (names and roles, never the tokens)")
    _db_arg(lst)
    lst.set_defaults(func=_token_list)
    revoke = tsub.add_parser("revoke", help="delete one token by --id, or all with a --name")
    _db_arg(revoke)
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", help="the token's id (from `token list`)")
    which.add_argument("--name", help="revoke every token with this name")
    revoke.set_defaults(func=_token_revoke)

    migrate = sub.add_parser("migrate", help="create or upgrade the database schema")
    _db_arg(migrate)
    migrate.set_defaults(func=_migrate)


def _open(url: str):
    from qonnect.cli import UserError
    from qonnect.kb import migrations
    from qonnect.kb.storage import Database, StorageError

    try:
        db = Database(url)
        migrations.migrate(db)
    except StorageError as exc:
        raise UserError(str(exc)) from None
    return db


def _write(url: str, fn):
    db = _open(url)
    conn = db.connect()
    try:
        conn.begin()
        result = fn(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        db.close()
    return result


def _serve(args: argparse.Namespace) -> int:
    from qonnect.cli import UserError
    from qonnect.kb.deps import Settings
    from qonnect.kb.server import serve

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key must be given together")
    for opt in ("tls_cert", "tls_key"):
        path = getattr(args, opt)
        if path and not os.path.isfile(path):
            raise UserError(f"--{opt.replace('_', '-')}: {path} is not a file")
    if args.max_body < 1024:
        raise UserError("--max-body: expected at least 1024 bytes")
    if args.heartbeat_timeout <= 0:
        raise UserError("--heartbeat-timeout: expected a positive number of seconds")
    if not 0 <= args.port <= 65535:
        raise UserError("--port: expected 0..65535")
    if not 0 < args.request_timeout <= 3600:
        raise UserError("--request-timeout: expected seconds in (0, 3600]")
    if not 1 <= args.max_connections <= 1_000_000:
        raise UserError("--max-connections: expected 1..1000000")
    if not args.tls_cert and not args.insecure_listen and not _loopback(args.host):
        raise UserError(
            f"--host {args.host}: serving plain HTTP beyond this host would send "
            "bearer tokens in clear text; give --tls-cert/--tls-key, or "
            "--insecure-listen if a TLS-terminating proxy sits in front"
        )
    _open(args.db).close()  # fail early, with a clear message, on a bad --db
    settings = Settings(
        db_url=args.db,
        heartbeat_timeout=args.heartbeat_timeout,
        max_body=args.max_body,
        access_log=args.access_log,
        request_timeout=args.request_timeout,
        max_connections=args.max_connections,
    )
    try:
        serve(settings, args.host, args.port, args.tls_cert, args.tls_key, args.port_file, args.access_log)
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0


def _loopback(host: str) -> bool:
    """Whether the address only accepts connections from this host."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token_create(args: argparse.Namespace) -> int:
    from qonnect.cli import UserError
    from qonnect.kb import auth

    if args.role == "agent" and not args.cluster:
        raise UserError("--cluster is required for --role agent")
    if args.role != "agent" and args.cluster:
        raise UserError("--cluster is only for --role agent")
    if args.cluster and not re.match(NAME_PATTERN, args.cluster):
        raise UserError(f"--cluster: {args.cluster!r} is not a DNS label")
    made = _write(
        args.db, lambda conn: auth.insert_token(conn, args.role, args.cluster, args.name, time.time())
    )
    print(made["token"])
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from qonnect.kb import auth

    db = _open(args.db)
    try:
        with db.reader() as conn:
            print(json.dumps(auth.list_tokens(conn), indent=2))
    finally:
        db.close()
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from qonnect.cli import UserError
    from qonnect.kb import auth

    if args.id:
        count = _write(args.db, lambda conn: auth.revoke_token_id(conn, args.id))
        if not count:
            raise UserError(f"--id: no token has the id {args.id!r}")
        print(f"revoked token {args.id}")
        return 0
    count = _write(args.db, lambda conn: auth.revoke_token(conn, args.name))
    if not count:
        raise UserError(f"--name: no token is called {args.name!r}")
    print(f"revoked {count} token(s) named {args.name!r}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from qonnect.kb import migrations

    db = _open(args.db)
    try:
        print(f"schema at version {migrations.current_version(db)} ({db.describe()})")
    finally:
        db.close()
    return 0
