"""Command-line entry points of the tracking server: ``mlinfra-lab track serve`` and ``track token``.

Contract: `register(sub, db_args, location)` adds, under ``mlinfra-lab track``, ``serve`` (run the
server on a database and an artifact root until interrupted) and ``token create USER``,
``token revoke ID`` and ``token list`` (a store ADMIN's direct access to the database, as
``--user``); `client_for(args)` is what every other ``track`` command opens when
``--server`` (or ``$MLINFRA_TRACKING_URL``) names a server.

Design decisions:
- ``token create`` prints the secret once, on its own line, and nothing else on stdout, so
  ``TOKEN=$(mlinfra-lab track token create bob)`` works; where it came from goes to stderr.
- With ``--server``, the identity is the token's: ``--user`` is refused (it would be a
  lie the server ignores), and ``$MLINFRA_USER`` plays no part.
- A secret never goes on a command line, where ``ps`` shows it to every local user: the
  token comes from ``$MLINFRA_TRACKING_TOKEN`` or ``--token-file PATH``. ``--token`` still
  works, with a warning that says what to use instead.
- ``serve``'s startup line names the database with its password masked (``***``), and an
  artifact root with credentials in its URL likewise: that line ends up in logs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mlinfra_lab.errors import CommandError

__all__ = ["client_for", "limits_from", "masked_url", "register", "token_from"]

URL_ENV = "MLINFRA_TRACKING_URL"


def client_for(args: argparse.Namespace):  # noqa: ANN201 (a TrackingClient)
    """A `TrackingClient` on ``--server`` with ``--token`` (or ``$MLINFRA_TRACKING_TOKEN``)."""
    from mlinfra_lab.tracking.server.client import TrackingClient

    if args.user is not None:
        raise CommandError(
            "--user cannot be used with --server: the server acts as the user of "
            "--token (or $MLINFRA_TRACKING_TOKEN); use that user's token instead"
        )
    return TrackingClient(args.server, token_from(args))


def token_from(args: argparse.Namespace) -> str | None:
    """The token of ``--token-file`` (its first line), or of the deprecated ``--token`` (with
    a warning on stderr), or None: `TrackingClient` then reads ``$MLINFRA_TRACKING_TOKEN``."""
    if getattr(args, "token_file", None):
        try:
            lines = Path(args.token_file).read_text().splitlines()
        except OSError as err:
            raise CommandError(
                f"cannot read --token-file {args.token_file}: {err.strerror}; "
                "write the token there (chmod 600), or set $MLINFRA_TRACKING_TOKEN"
            ) from None
        if not lines or not lines[0].strip():
            raise CommandError(f"--token-file {args.token_file} is empty; write the token there")
        return lines[0].strip()
    if getattr(args, "token", None):
        print(
            "warning: --token is deprecated: a command line is visible to every local user "
            "(ps); set $MLINFRA_TRACKING_TOKEN or use --token-file PATH instead",
            file=sys.stderr,
        )
        return args.token
    return None


def masked_url(url: str) -> str:
    """`url` with the password of its user-info part replaced by ``***`` (for logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:  # not a URL we can parse: show none of it
        return "<unparsable URL>"


def limits_from(args: argparse.Namespace):  # noqa: ANN201 (a ClientLimits; uvicorn imported late)
    """The `ClientLimits` of ``serve``'s options: each one given replaces its default."""
    from mlinfra_lab.tracking.server.slow_clients import ClientLimits

    given = {
        field: getattr(args, field)
        for field in (
            "header_timeout_s",
            "body_timeout_s",
            "max_connections",
            "max_connections_per_client",
            "worker_threads",
        )
        if getattr(args, field, None) is not None
    }
    return ClientLimits(**given)


def _serve(args: argparse.Namespace) -> int:
    from mlinfra_lab.tracking.server.app import create_app
    from mlinfra_lab.tracking.server.serving import serve

    limits = limits_from(args)

    app = create_app(
        args.db,
        args.artifacts,
        cold_root=args.cold_root,
        cache_dir=args.cache_dir,
        cache_bytes=int(args.cache_gb * 2**30),
    )
    print(
        f"tracking server: database {masked_url(args.db)}, artifacts {masked_url(args.artifacts)}",
        file=sys.stderr,
    )
    serve(app, args.host, args.port, limits)
    return 0


def _token(args: argparse.Namespace) -> int:
    from mlinfra_lab.tracking.server import tokens
    from mlinfra_lab.tracking.store import TrackingStore

    with TrackingStore(args.db, args.artifacts, default_user=args.user) as store:
        by = store.default_user
        if args.token_command == "create":
            issued = tokens.create_token(store.engine, args.principal, by, args.note)
            print(
                f"token {issued.id} for {issued.user} (shown once; store it like a password):",
                file=sys.stderr,
            )
            print(issued.secret)
        elif args.token_command == "revoke":
            tokens.revoke_token(store.engine, args.id, by)
            print(f"token {args.id} revoked: its next request is refused")
        else:
            for t in tokens.list_tokens(store.engine, by, args.of):
                state = "revoked" if t.revoked_at else "valid"
                print(f"{t.id:>6}  {t.user:<16} {state:<8} by {t.created_by:<12} {t.note or ''}")
    return 0


def register(
    sub: argparse._SubParsersAction,
    db_args: argparse.ArgumentParser,
    location: argparse.ArgumentParser,
) -> None:
    """Add ``serve`` and ``token`` to ``mlinfra-lab track`` (`db_args`: ``--db``, ``--artifacts``,
    ``--user``; `location`: the first two only, for ``serve``, which acts as no one)."""
    serve = sub.add_parser(
        "serve",
        parents=[location],
        help="run the tracking server (the trust boundary) on a database",
        description="Serve the tracking store over HTTP: every request acts as the user of its bearer "
        "token (mlinfra-lab track token create USER), never as a name it gives. Plain HTTP "
        "on loopback by default: put a TLS proxy in front before listening elsewhere. "
        "Example: mlinfra-lab track serve --db sqlite:///t.db --artifacts ./art --port 5000",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, loopback only)",
    )
    serve.add_argument(
        "--port", type=int, default=5000, help="port (default 5000; 0 picks a free one, printed)"
    )
    serve.add_argument(
        "--cache-dir",
        default=None,
        help="local directory for the hot-artifact cache (default: none)",
    )
    serve.add_argument(
        "--cache-gb", type=float, default=1.0, help="size of that cache in GiB (default 1)"
    )
    serve.add_argument(
        "--cold-root",
        default=None,
        help="the cold tier (fsspec URL) retention may move artifacts to; a policy sent "
        "through the server may name no other",
    )
    guard = serve.add_argument_group(
        "defences against slow and hostile clients",
        "for a server that faces its clients itself; behind a proxy that enforces its own "
        "(book/appendix_tracking_deploy.md), set --max-connections-per-client 0: every connection "
        "then comes from the proxy's address",
    )
    guard.add_argument(
        "--header-timeout",
        dest="header_timeout_s",
        type=float,
        default=None,
        metavar="S",
        help="close a connection that sends no complete request head within S seconds (default 10)",
    )
    guard.add_argument(
        "--body-timeout",
        dest="body_timeout_s",
        type=float,
        default=None,
        metavar="S",
        help="answer 408 and close when a request body pauses over S seconds (default 30)",
    )
    guard.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="refuse connections beyond N open ones; keep it under the file-descriptor limit "
        "(ulimit -n) less what the database and artifact files need (default 900)",
    )
    guard.add_argument(
        "--max-connections-per-client",
        type=int,
        default=None,
        metavar="N",
        help="refuse connections beyond N open ones from one client address; 0: no cap, "
        "behind a proxy (default 64)",
    )
    guard.add_argument(
        "--worker-threads",
        type=int,
        default=None,
        metavar="N",
        help="threads that run the store's calls; uploads never wait in one (default 40)",
    )
    serve.set_defaults(func=_serve)

    token = sub.add_parser(
        "token",
        help="create, revoke or list the server's bearer tokens (store ADMIN)",
        description="Bearer tokens of the tracking server. Direct database access as "
        "--user, who must be a store ADMIN; only a token's sha256 is stored.",
    )
    tsub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = tsub.add_parser(
        "create",
        parents=[db_args],
        help="a new token for USER; prints it once",
        description="Create a token for USER (registered as a user if new) and print "
        "it once on stdout: TOKEN=$(mlinfra-lab track token create bob)",
    )
    create.add_argument("principal", metavar="USER", help="the user the token acts as")
    create.add_argument(
        "--note", default=None, help="what the token is for (shown by 'token list')"
    )
    revoke = tsub.add_parser(
        "revoke", parents=[db_args], help="revoke a token by id (its next request gets 401)"
    )
    revoke.add_argument(
        "id", type=int, help="token id, as printed by 'token create' and 'token list'"
    )
    listing = tsub.add_parser(
        "list", parents=[db_args], help="list tokens: id, user, valid or revoked (no secrets)"
    )
    listing.add_argument("--of", default=None, metavar="USER", help="only this user's tokens")
    for p in (create, revoke, listing):
        p.set_defaults(func=_token)


def server_args(parser: argparse.ArgumentParser) -> None:
    """``--server`` and ``--token``: send a ``track`` command through a tracking server."""
    parser.add_argument(
        "--server",
        default=os.environ.get(URL_ENV),
        metavar="URL",
        help=f"send the command through this tracking server (default: ${URL_ENV}); "
        "it acts as the token's user, and --user is refused",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="read the bearer token for --server from this file's first line "
        "(default: $MLINFRA_TRACKING_TOKEN)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="deprecated: the token on the command line is visible in ps; "
        "use $MLINFRA_TRACKING_TOKEN or --token-file",
    )
